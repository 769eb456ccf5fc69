//! The trusted agents' keys: lists-refresh fetches each agent's key directory from a loopback
//! stand-in that serves it as a real agent does (testkit's `key_directory`: the draft's media
//! type, caching and response signatures), checks it, and delivers the keys with the lists, to
//! the ConfigMap and the WasmPlugin's pluginConfig, or to `--out-dir`. A failing directory keeps
//! the last good keys; an invalid one is refused naming the agent. And the keys delivered this
//! way verify an agent's signed request in the real filter module.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::PathBuf;

use proxy_wasm_host::{Host, HostConfig, Outcome, Request};
use serde_json::{Value, json};
use testkit::http::{Reply, Server};
use testkit::key_directory::{AgentKey, Directory, MEDIA_TYPE, unix_now};
use testkit::workspace;

use common::{CM, Job, WASM, configmap, failure_log, stderr, writing_run};

const WELL_KNOWN: &str = "/.well-known/http-message-signatures-directory";

/// A record with one tor list (from a file) and these agents.
fn tor_and_agents(job: &Job, agents: Value) -> PathBuf {
    let exits = job.dir.path().join("exits.txt");
    std::fs::write(&exits, "185.220.101.1\n").unwrap();
    job.write_sources(
        &json!({"kind": "ListSources", "version": 3, "timeout_seconds": 5,
        "lists": [{"name": "tor", "generator": "tor", "sources": [exits]}],
        "agents": agents}),
    )
}

/// The agent of the tests, trusted by its directory's URL on `server`.
fn examplebot(server: &Server) -> Value {
    json!([{"name": "examplebot", "directory": format!("{}{WELL_KNOWN}", server.url)}])
}

/// The authority the job asks the stand-in at `url` for (`127.0.0.1:<port>`).
fn authority(url: &str) -> &str {
    url.trim_start_matches("http://")
}

fn wasmplugin(config: Value) -> Reply {
    Reply::json(
        200,
        json!({"apiVersion": "extensions.istio.io/v1alpha1", "kind": "WasmPlugin",
               "metadata": {"name": "pow-filter", "namespace": "edge"},
               "spec": {"url": "oci://example/pow-filter:1", "pluginConfig": config}})
        .to_string(),
    )
}

/// The API's script of a run that writes: GET both, apply both.
fn api_writing(cm: Reply) -> Server {
    writing_run(cm, wasmplugin(json!({"mode": "listed"})))
}

/// The bodies of the ConfigMap's and the WasmPlugin's applies.
fn applies(api: &Server) -> (Value, Value) {
    let requests = api.requests();
    assert_eq!(requests.len(), 4, "{requests:?}");
    assert!(requests[2].target.starts_with(CM), "{}", requests[2].target);
    assert!(
        requests[3].target.starts_with(WASM),
        "{}",
        requests[3].target
    );
    (
        serde_json::from_slice(&requests[2].body).unwrap(),
        serde_json::from_slice(&requests[3].body).unwrap(),
    )
}

/// The directory as the filter reads it: the test key's entry, `kty`, `crv`, `x`, `use` only
/// (its `kid` is not the thumbprint; the filter computes that).
fn delivered(key: &AgentKey) -> Value {
    json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": key.x(), "use": "sig"}]})
}

#[test]
fn a_trusted_agents_keys_reach_the_pluginconfig_and_verify_its_requests_in_the_module() {
    let test = "a_trusted_agents_keys_reach_the_pluginconfig_and_verify_its_requests_in_the_module";
    let Some(key) = AgentKey::rfc9421(test) else {
        return;
    };
    let job = Job::new();
    let directory =
        Server::start_for(|url| vec![Directory::of(&[&key]).reply(authority(url), unix_now())])
            .unwrap();
    let sources = tor_and_agents(&job, examplebot(&directory));
    let api = api_writing(configmap(json!({})));
    let out = job.run(&api, &sources);
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");

    let asked = directory.requests();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        (asked[0].method.as_str(), asked[0].target.as_str()),
        ("GET", WELL_KNOWN)
    );
    assert_eq!(asked[0].header("accept"), Some(MEDIA_TYPE));
    let (cm, wasm) = applies(&api);
    let keys: Value =
        serde_json::from_str(cm["data"]["examplebot.directory.json"].as_str().unwrap()).unwrap();
    assert_eq!(keys, delivered(&key));
    let agents = &wasm["spec"]["pluginConfig"]["agents"];
    assert_eq!(agents, &json!({"examplebot": {"keys": delivered(&key)}}));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        summary["agents"],
        json!({"refreshed": ["examplebot"], "kept": []})
    );

    signed_request_verifies_in_the_module(test, agents);
}

/// The draft's signed request (architecture-05's legacy `Signature-Agent` vector, the RFC 9421
/// test key) passes a `signed_agent` rule of the real module configured with `agents` as
/// delivered; the same request unsigned does not.
fn signed_request_verifies_in_the_module(test: &str, agents: &Value) {
    let Some(shared) = workspace::shared_dir(test) else {
        return;
    };
    let Some(wasm) = workspace::filter_module(test) else {
        return;
    };
    let config = json!({
        "mode": "all", "difficulty": 8, "signature_max_age_secs": 3600, "agents": agents,
        "rules": [{"name": "signed", "signed_agent": ["examplebot"], "action": "allow"}],
    });
    let vector = "fixtures/bots/web-bot-auth-drafts/arch05-ed25519-sig2-signature-agent-legacy-string.headers.txt";
    let fields: Vec<(String, String)> = std::fs::read_to_string(shared.join(vector))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.to_owned()))
        .collect();
    // Within the vector's window: created 1735689600, expires 1735693200.
    let mut host = Host::load(
        &wasm,
        HostConfig {
            plugin_config: config.to_string().into_bytes(),
            env: vec![(
                "POW_HMAC_SECRET".into(),
                b"a-test-secret-that-is-at-least-32-bytes-long".to_vec(),
            )],
            time_nanos: Some(1_735_690_000 * 1_000_000_000),
            ..HostConfig::default()
        },
    )
    .unwrap();
    let request = |signed: bool| {
        let mut r = Request {
            authority: "example.com".to_owned(),
            scheme: "https".to_owned(),
            ..Request::default()
        }
        .from_address("198.51.100.7:40000")
        .header("user-agent", "examplebot/1.0");
        if signed {
            for (name, value) in &fields {
                r = r.header(name, value);
            }
        }
        r
    };
    let decision = |o: &Outcome| match o {
        Outcome::Continue { headers } => headers
            .iter()
            .find(|(n, _)| n == pow_core::filter::DECISION_HEADER)
            .map(|(_, v)| v.clone())
            .unwrap_or_default(),
        Outcome::Local { status, .. } => format!("local {status}"),
    };
    let signed = host.request(request(true)).unwrap();
    assert_eq!(decision(&signed), "rule=signed; action=allowed");
    let unsigned = host.request(request(false)).unwrap();
    assert_eq!(
        decision(&unsigned),
        "local 403",
        "mode all challenges the unsigned"
    );
}

/// The previous keys, as the ConfigMap holds them after a good run.
fn previous(key: &AgentKey) -> Value {
    json!({"tor.txt": "185.220.101.1/32\n", "version": "v0",
           "examplebot.directory.json": delivered(key).to_string()})
}

/// A reply the stand-in makes for its own authority.
type ReplyFor<'a> = Box<dyn Fn(&str) -> Reply + 'a>;

#[test]
fn a_failing_directory_keeps_the_last_good_keys_and_is_named() {
    let test = "a_failing_directory_keeps_the_last_good_keys_and_is_named";
    let Some(key) = AgentKey::rfc9421(test) else {
        return;
    };
    let good = Directory::of(&[&key]);
    let unsigned = Directory {
        signers: vec![],
        ..good.clone()
    };
    // Signed by another key than the one it lists, under the listed key's keyid.
    let forged = Directory {
        signers: vec![(AgentKey::from_seed([7; 32], &key.keyid), key.keyid.clone())],
        ..good.clone()
    };
    let empty = Directory {
        body: r#"{"keys": []}"#.into(),
        ..good.clone()
    };
    let now = unix_now();
    let cases: Vec<(&str, ReplyFor<'_>)> = vec![
        ("HTTP 503", Box::new(|_| Reply::status(503))),
        (
            "served as `application/json`",
            Box::new(|_| Reply::json(200, good.body.clone())),
        ),
        (
            "the response has no Signature-Input and Signature",
            Box::new(|a| unsigned.reply(a, now)),
        ),
        (
            "`binding0` does not verify",
            Box::new(|a| forged.reply(a, now)),
        ),
        ("no Ed25519 key", Box::new(|a| empty.reply(a, now))),
        (
            "`binding0` has expired",
            Box::new(|a| good.reply(a, now - 7200)),
        ),
        (
            "redirected to `https://elsewhere.example/d`",
            Box::new(|_| Reply::Redirect {
                status: 302,
                location: "https://elsewhere.example/d".into(),
            }),
        ),
    ];
    for (reason, reply) in cases {
        let job = Job::new();
        let directory = Server::start_for(|url| vec![reply(authority(url))]).unwrap();
        let sources = tor_and_agents(&job, examplebot(&directory));
        let api = api_writing(configmap(previous(&key)));
        let out = job.run(&api, &sources);
        let log = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{reason}: {log}");
        assert!(log.contains(reason), "{reason} not in: {log}");
        assert!(
            log.contains("agent examplebot: keeps its previous keys"),
            "{reason}: {log}"
        );
        assert!(
            log.contains("these failed: agent examplebot (key directory"),
            "{reason}: {log}"
        );
        let (cm, wasm) = applies(&api);
        let kept: Value =
            serde_json::from_str(cm["data"]["examplebot.directory.json"].as_str().unwrap())
                .unwrap();
        assert_eq!(kept, delivered(&key), "{reason}");
        assert_eq!(
            wasm["spec"]["pluginConfig"]["agents"],
            json!({"examplebot": {"keys": delivered(&key)}}),
            "{reason}: the last good keys, never blank"
        );
        let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            summary["agents"],
            json!({"refreshed": [], "kept": ["examplebot"]}),
            "{reason}"
        );
    }
}

/// A directory the filter would refuse (an Ed25519 entry whose `x` is no key) is refused with
/// the agent's name; without previous keys, the agent is left out, and the lists still go out.
#[test]
fn an_invalid_directory_is_refused_with_its_name() {
    let test = "an_invalid_directory_is_refused_with_its_name";
    let Some(key) = AgentKey::rfc9421(test) else {
        return;
    };
    let broken = Directory {
        body: r#"{"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "AAAA"}]}"#.into(),
        ..Directory::of(&[&key])
    };
    let job = Job::new();
    let directory =
        Server::start_for(|url| vec![broken.reply(authority(url), unix_now())]).unwrap();
    let sources = tor_and_agents(&job, examplebot(&directory));
    let api = api_writing(Reply::status(404));
    let log = job.run_failing(&api, &sources);
    for needle in [
        "agent examplebot (key directory",
        "the filter would refuse it: `keys[0].x`",
        "has no previous version: nothing is written for it",
    ] {
        assert!(log.contains(needle), "{needle} not in: {log}");
    }
    let (cm, wasm) = applies(&api);
    assert!(cm["data"].get("examplebot.directory.json").is_none());
    assert!(wasm["spec"]["pluginConfig"].get("agents").is_none());
    assert!(wasm["spec"]["pluginConfig"]["lists"]["packed"]["tor"].is_string());
}

/// A record the job would fetch a directory from over plain http to a remote host is refused
/// before anything is asked of anyone.
#[test]
fn a_directory_over_plain_http_to_another_host_is_refused_naming_the_field() {
    let job = Job::new();
    let sources = tor_and_agents(
        &job,
        json!([{"name": "examplebot",
        "directory": "http://bot.example.com/.well-known/http-message-signatures-directory"}]),
    );
    let api = Server::start(vec![]).unwrap();
    let out = job.run(&api, &sources);
    let log = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(log.contains("agents[0].directory"), "{log}");
    assert!(log.contains("https only"), "{log}");
    assert!(api.requests().is_empty());
}

/// `make lists`: the keys go to `<name>.directory.json` beside the lists (what `make explain`
/// reads); a failing directory keeps that file, and one with none to keep gets none.
#[test]
fn the_out_dir_gets_each_agents_keys_and_a_failing_directory_keeps_its_file() {
    let test = "the_out_dir_gets_each_agents_keys_and_a_failing_directory_keeps_its_file";
    let Some(key) = AgentKey::rfc9421(test) else {
        return;
    };
    let job = Job::new();
    let dir = job.dir.path().join("lists");
    let good = Server::start_for(|url| {
        vec![
            Directory::of(&[&key]).reply(authority(url), unix_now()),
            Reply::status(500),
        ]
    })
    .unwrap();
    let sources = tor_and_agents(&job, examplebot(&good));
    let out = job.run_into(&dir, &sources);
    assert!(out.status.success(), "{}", stderr(&out));
    let file = dir.join("examplebot.directory.json");
    let written: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(written, delivered(&key));
    // The next run meets the directory down: the file stays as it was.
    let out = job.run_into(&dir, &sources);
    let log = failure_log(&out);
    assert!(
        log.contains("agent examplebot: keeps its previous keys"),
        "{log}"
    );
    let kept: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(kept, written);
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        summary["agents"],
        json!({"refreshed": [], "kept": ["examplebot"]})
    );
    assert_eq!(summary["failed"], json!([]));
}

/// Offline, with nothing to keep: the run says there is no previous version and that nothing was
/// written, lists nothing as kept, and creates no folder.
#[test]
fn an_offline_run_with_nothing_to_keep_says_so_and_creates_nothing() {
    let job = Job::new();
    let dir = job.dir.path().join("out/lists");
    let down = testkit::http::closed_port_url().unwrap();
    let file = job.dir.path().join("sources.json");
    let record = json!({"kind": "ListSources", "version": 3, "timeout_seconds": 2,
        "lists": [{"name": "tor", "generator": "tor", "sources": [format!("{down}/torbulkexitlist")]}],
        "agents": [{"name": "examplebot", "directory": format!("{down}{WELL_KNOWN}")}]});
    std::fs::write(&file, record.to_string()).unwrap();
    let out = job.run_into(&dir, &file);
    let log = failure_log(&out);
    assert!(
        log.contains("list tor: has no previous version: nothing is written for it"),
        "{log}"
    );
    assert!(
        log.contains("agent examplebot: has no previous version: nothing is written for it"),
        "{log}"
    );
    assert!(!log.contains("keeps its previous"), "{log}");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["kept"], json!([]));
    assert_eq!(summary["failed"], json!(["tor", "agent examplebot"]));
    assert!(!dir.exists(), "nothing written, nothing created");
    assert!(!dir.parent().unwrap().exists());
}

/// A second run that finds the same keys (and the same lists) already published writes nothing:
/// the keys are compared as delivered, not re-stamped every hour.
#[test]
fn the_same_keys_already_published_write_nothing() {
    let test = "the_same_keys_already_published_write_nothing";
    let Some(key) = AgentKey::rfc9421(test) else {
        return;
    };
    let job = Job::new();
    let directory = Server::start_for(|url| {
        let reply = |now| Directory::of(&[&key]).reply(authority(url), now);
        vec![reply(unix_now()), reply(unix_now())]
    })
    .unwrap();
    let sources = tor_and_agents(&job, examplebot(&directory));
    let api = api_writing(configmap(json!({})));
    job.run_ok(&api, &sources);
    let (cm, wasm) = applies(&api);
    // What the API server holds after the first run.
    let stored_wasm = Reply::json(
        200,
        json!({"apiVersion": "extensions.istio.io/v1alpha1", "kind": "WasmPlugin",
               "metadata": {"name": "pow-filter", "namespace": "edge"},
               "spec": {"url": "oci://example/pow-filter:1",
                        "pluginConfig": {"mode": "listed",
                                         "lists": wasm["spec"]["pluginConfig"]["lists"],
                                         "agents": wasm["spec"]["pluginConfig"]["agents"]}}})
        .to_string(),
    );
    let api = Server::start(vec![configmap(cm["data"].clone()), stored_wasm]).unwrap();
    let out = job.run(&api, &sources);
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("lists unchanged since version"), "{log}");
    assert_eq!(api.requests().len(), 2, "only the two GETs");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["changed"], false);
}
