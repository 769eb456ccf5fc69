//! lists-refresh against a scripted Kubernetes API stand-in on loopback: the real generators
//! run on the real captures (served over loopback HTTP or read from files), and every request
//! is asserted (method, path, field manager, content type, token, body). And with `--out-dir`
//! (what `make lists` runs): the lists as files, no API at all. The job against the real API
//! server, under its real identity and Role, is `api_server.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pow_core::lists::Net;
use pow_core::packed;
use serde_json::{Value, json};
use testkit::http::{Reply, Request, Server};
use testkit::workspace;

use common::{CM, Job, NOW, WASM, configmap, data_keys, failure_log, stderr, writing_run};

const APPLY_QUERY: &str = "?fieldManager=edgepop-lists&force=true";

/// A record of these lists.
fn lists_record(job: &Job, lists: Value) -> PathBuf {
    job.write_sources(
        &json!({"kind": "ListSources", "version": 3, "max_shrink_percent": 50,
                              "timeout_seconds": 5, "lists": lists}),
    )
}

fn wasmplugin(lists_version: &str) -> Reply {
    Reply::json(
        200,
        json!({"apiVersion": "extensions.istio.io/v1alpha1", "kind": "WasmPlugin",
               "metadata": {"name": "pow-filter", "namespace": "edge"},
               "spec": {"url": "oci://example/pow-filter:1", "phase": "AUTHN",
                        "pluginConfig": {"mode": "listed",
                                         "lists": {"version": lists_version, "sets": {}}}}})
        .to_string(),
    )
}

/// The API server of one publishing run: the ConfigMap holding `data` and the WasmPlugin at
/// `lists_version` are read, then both applies succeed.
fn apply_conversation(data: Value, lists_version: &str) -> Server {
    writing_run(configmap(data), wasmplugin(lists_version))
}

fn assert_get(request: &Request, path: &str) {
    assert_eq!(
        (request.method.as_str(), request.target.as_str()),
        ("GET", path)
    );
    assert_eq!(request.header("authorization"), Some("Bearer test-token"));
}

/// Asserts a server-side apply and returns its body.
fn assert_apply(request: &Request, path: &str) -> Value {
    assert_eq!(request.method, "PATCH");
    assert_eq!(request.target, format!("{path}{APPLY_QUERY}"));
    assert_eq!(
        request.header("content-type"),
        Some("application/apply-patch+yaml")
    );
    assert_eq!(request.header("authorization"), Some("Bearer test-token"));
    serde_json::from_slice(&request.body).unwrap()
}

/// The four requests of a run that wrote (see [`apply_conversation`]): the bodies of its
/// ConfigMap and WasmPlugin applies, each asserted a server-side apply.
#[track_caller]
fn applied(api: &Server) -> (Value, Value) {
    let requests = api.requests();
    assert_eq!(requests.len(), 4);
    (
        assert_apply(&requests[2], CM),
        assert_apply(&requests[3], WASM),
    )
}

const BULK: &str = "tor/torbulkexitlist_2023-10-14.txt";
const SLICE: &str = "asn/iptoasn/ip2asn-v4_slice-google-cloudflare_2019-02-19.tsv";

/// The captures [`BULK`] and [`SLICE`]; `None` (skipped) without the shared material.
fn bulk_and_slice(test: &str) -> Option<(PathBuf, PathBuf)> {
    Some((
        workspace::fixture(test, BULK)?,
        workspace::fixture(test, SLICE)?,
    ))
}

#[test]
fn both_lists_are_regenerated_and_applied_to_the_configmap_and_the_wasmplugin() {
    let test = "both_lists_are_regenerated_and_applied_to_the_configmap_and_the_wasmplugin";
    let Some((bulk, slice)) = bulk_and_slice(test) else {
        return;
    };
    let job = Job::new();
    let tor_source = Server::start(vec![Reply::ok(std::fs::read(&bulk).unwrap())]).unwrap();
    let sources = lists_record(
        &job,
        json!([
            {"name": "tor", "generator": "tor", "sources": [format!("{}/torbulkexitlist", tor_source.url)]},
            {"name": "hosting", "generator": "asn", "sources": [slice], "asns": [13335, 15169]},
        ]),
    );
    let api = apply_conversation(json!({"notes": "kept by its own manager"}), "older");
    let out = job.run_ok(&api, &sources);
    // stdout carries the run's summary, and only that.
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        summary,
        json!({"version": NOW, "changed": true, "regenerated": ["tor", "hosting"], "kept": []})
    );
    let requests = api.requests();
    assert_eq!(requests.len(), 4);
    assert_get(&requests[0], CM);
    assert_get(&requests[1], WASM);

    let cm = assert_apply(&requests[2], CM);
    assert_eq!(cm["apiVersion"], "v1");
    assert_eq!(cm["kind"], "ConfigMap");
    assert_eq!(cm["metadata"]["resourceVersion"], "42");
    assert_eq!(
        data_keys(&cm),
        ["generated_at", "hosting.txt", "tor.txt", "version"]
    );
    let data = &cm["data"];
    assert_eq!(data["version"], NOW);
    let tor = data["tor.txt"].as_str().unwrap();
    assert_eq!(tor.lines().count(), 1305);
    assert!(tor.lines().all(|l| l.ends_with("/32")));

    let wasm = assert_apply(&requests[3], WASM);
    assert_eq!(wasm["kind"], "WasmPlugin");
    assert_eq!(wasm["apiVersion"], "extensions.istio.io/v1alpha1");
    // Only pluginConfig.lists: the url, phase and the rest of pluginConfig belong to the edge
    // layer's manager and are left out of this apply.
    assert_eq!(wasm["spec"].as_object().unwrap().len(), 1);
    assert_eq!(wasm["spec"]["pluginConfig"].as_object().unwrap().len(), 1);
    let lists = &wasm["spec"]["pluginConfig"]["lists"];
    assert_eq!(lists["version"], NOW);
    assert_eq!(lists["generated_at"], NOW);
    // Every list packed, the same prefixes as the ConfigMap's text.
    assert_eq!(lists.as_object().unwrap().len(), 3, "{lists}");
    assert_eq!(unpack(&lists["packed"]["tor"]), parse(&data["tor.txt"]));
    assert_eq!(
        unpack(&lists["packed"]["hosting"]),
        parse(&data["hosting.txt"])
    );
    assert!(cm.get("binaryData").is_none(), "the text fits");
}

/// A packed list's prefixes.
fn unpack(value: &Value) -> Vec<Net> {
    packed::decode(value.as_str().unwrap(), packed::MAX_PREFIXES).unwrap()
}

/// A text list's prefixes, in the packed form's order, each once.
fn parse(text: &Value) -> Vec<Net> {
    let mut nets = in_packed_order(pow_core::lists::parse_set(text.as_str().unwrap()).unwrap());
    nets.dedup();
    nets
}

/// Prefixes in the packed form's order (sorted, IPv4 first).
fn in_packed_order(mut nets: Vec<Net>) -> Vec<Net> {
    nets.sort_by_key(|n| match *n {
        Net::V4(a, l) => (0, u128::from(a), l),
        Net::V6(a, l) => (1, a, l),
    });
    nets
}

#[test]
fn a_failing_source_keeps_its_list_publishes_the_other_and_names_it() {
    let test = "a_failing_source_keeps_its_list_publishes_the_other_and_names_it";
    let Some(slice) = workspace::fixture(test, SLICE) else {
        return;
    };
    let job = Job::new();
    let tor_source = Server::start(vec![Reply::status(500)]).unwrap();
    let tor_url = format!("{}/torbulkexitlist", tor_source.url);
    let sources = lists_record(
        &job,
        json!([
            {"name": "tor", "generator": "tor", "sources": [tor_url]},
            {"name": "hosting", "generator": "asn", "sources": [slice], "asns": [13335]},
        ]),
    );
    let old_tor = "185.220.101.1/32\n185.220.101.2/32\n";
    let api = apply_conversation(json!({"tor.txt": old_tor, "version": "v0"}), "v0");
    let log = job.run_failing(&api, &sources);
    assert!(
        log.contains(&format!(
            "lists-gen-tor: error: source {tor_url}: HTTP status 500"
        )),
        "{log}"
    );
    assert!(
        log.contains("these failed: tor (lists-gen-tor exited with 1; keeps its previous version)"),
        "{log}"
    );
    let (cm, wasm) = applied(&api);
    assert_eq!(cm["data"]["tor.txt"], old_tor);
    assert!(
        cm["data"]["hosting.txt"]
            .as_str()
            .unwrap()
            .contains("1.1.1.0/24")
    );
    assert_eq!(
        unpack(&wasm["spec"]["pluginConfig"]["lists"]["packed"]["tor"]),
        parse(&json!(old_tor))
    );
}

#[test]
fn a_large_shrink_and_a_source_down_publish_nothing() {
    let test = "a_large_shrink_and_a_source_down_publish_nothing";
    let Some(bulk) = workspace::fixture(test, BULK) else {
        return;
    };
    let job = Job::new();
    let full = std::fs::read_to_string(&bulk).unwrap();
    let previous: String = full.lines().map(|l| format!("{l}/32\n")).collect();
    let tor_source = Server::start(vec![Reply::ok(testkit::first_lines(&bulk, 100))]).unwrap();
    let down = format!(
        "{}/ip2asn-combined.tsv.gz",
        testkit::http::closed_port_url().unwrap()
    );
    let sources = lists_record(
        &job,
        json!([
            {"name": "tor", "generator": "tor", "sources": [format!("{}/torbulkexitlist", tor_source.url)]},
            {"name": "hosting", "generator": "asn", "sources": [down], "asns": [13335]},
        ]),
    );
    let api = Server::start(vec![configmap(
        json!({"tor.txt": previous, "version": "v0"}),
    )])
    .unwrap();
    let log = tor_refused_for_its_shrink(&job.run(&api, &sources));
    assert!(
        log.contains(&format!("source {down}: unreachable")),
        "{log}"
    );
    assert!(log.contains("every list failed"), "{log}");
    let requests = api.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_get(&requests[0], CM);
}

/// `count` distinct public IPv4 addresses with gaps of 1 to 64 (deterministic), one a line:
/// about 14 bytes a prefix as text and 1 packed.
fn spread_addresses(count: usize) -> String {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut addr: u32 = 11 << 24;
    let mut out = String::with_capacity(count * 15);
    for _ in 0..count {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        addr += 1 + (x % 64) as u32;
        let [a, b, c, d] = addr.to_be_bytes();
        out.push_str(&format!("{a}.{b}.{c}.{d}\n"));
    }
    out
}

/// A tor list of `count` spread addresses, and the job to publish it.
fn big_tor(count: usize) -> (Job, PathBuf) {
    let job = Job::new();
    let file = job.dir.path().join("exits.txt");
    std::fs::write(&file, spread_addresses(count)).unwrap();
    let sources = lists_record(
        &job,
        json!([{"name": "tor", "generator": "tor", "sources": [file]}]),
    );
    (job, sources)
}

/// 250,000 prefixes: 3.5 MB as text, over both the ConfigMap's 1 MiB and the WasmPlugin's
/// 1.5 MiB; packed they fit both. The ConfigMap holds the list packed in binaryData (its text
/// would not fit), the WasmPlugin packed, and the next run reads the packed list back as its
/// previous list: unchanged, nothing written.
#[test]
fn a_list_over_the_limits_as_text_is_published_packed_and_read_back() {
    let (job, sources) = big_tor(250_000);
    let api = apply_conversation(json!({"notes": "kept by its own manager"}), "older");
    let out = job.run(&api, &sources);
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("packed, as text would not fit: binaryData tor.packed"),
        "{log}"
    );
    let requests = api.requests();
    assert_eq!(requests.len(), 4);
    let cm = assert_apply(&requests[2], CM);
    let keys: Vec<&str> = cm["data"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["generated_at", "version"]);
    let in_cm = &cm["binaryData"]["tor.packed"];
    assert!(
        requests[2].body.len() < 1024 * 1024,
        "{}",
        requests[2].body.len()
    );
    let wasm = assert_apply(&requests[3], WASM);
    let in_wasm = &wasm["spec"]["pluginConfig"]["lists"]["packed"]["tor"];
    assert_eq!(in_cm, in_wasm);
    assert_eq!(unpack(in_wasm).len(), 250_000);
    let text_len = spread_addresses(250_000).len() + 250_000 * 3; // each line gains "/32"
    assert!(text_len > 1536 * 1024, "{text_len}");
    assert!(
        requests[3].body.len() < 1536 * 1024 / 3,
        "{}",
        requests[3].body.len()
    );

    // The next run: the ConfigMap as applied, the WasmPlugin at its version.
    let mut applied = cm.clone();
    applied["data"]["notes"] = json!("kept by its own manager");
    let api = Server::start(vec![Reply::json(200, applied.to_string()), wasmplugin(NOW)]).unwrap();
    let out = job.run_ok(&api, &sources);
    assert!(
        stderr(&out).contains("unchanged since version"),
        "{}",
        stderr(&out)
    );
    assert_eq!(api.requests().len(), 2);
}

/// Lists that do not fit even packed are refused before any write, naming each list with its
/// prefix count and sizes: in the ConfigMap (here crowded by another manager's key) and in the
/// WasmPlugin (here crowded by a large annotation).
#[test]
fn lists_over_the_limits_even_packed_are_refused_naming_them_before_any_write() {
    let (job, sources) = big_tor(250_000);
    let crowded = "x".repeat(1024 * 1024 - 100_000);
    let api = Server::start(vec![configmap(json!({"notes": crowded}))]).unwrap();
    let log = job.run_failing(&api, &sources);
    assert!(log.contains("the policy-lists ConfigMap would be"), "{log}");
    assert!(log.contains("over the 1048576-byte limit"), "{log}");
    assert!(log.contains("(tor: 250000 prefixes, "), "{log}");
    assert!(log.contains("bytes as text, "), "{log}");
    assert!(log.contains("bytes packed); nothing was written"), "{log}");
    let requests = api.requests();
    assert_eq!(requests.len(), 1);
    assert_get(&requests[0], CM);

    let annotation = "x".repeat(1536 * 1024 - 200_000);
    let wasm = json!({"apiVersion": "extensions.istio.io/v1alpha1", "kind": "WasmPlugin",
                      "metadata": {"name": "pow-filter", "namespace": "edge",
                                   "annotations": {"note": annotation}},
                      "spec": {"pluginConfig": {"mode": "listed"}}});
    let api = Server::start(vec![
        configmap(json!({})),
        Reply::json(200, wasm.to_string()),
    ])
    .unwrap();
    let log = job.run_failing(&api, &sources);
    assert!(log.contains("the WasmPlugin would be"), "{log}");
    assert!(log.contains("over the 1572864-byte limit"), "{log}");
    assert!(log.contains("(tor: 250000 prefixes, "), "{log}");
    assert!(log.contains("bytes packed); nothing was written"), "{log}");
    let requests = api.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert_get(&requests[0], CM);
    assert_get(&requests[1], WASM);
}

#[test]
fn unchanged_lists_already_in_the_wasmplugin_write_nothing() {
    let job = Job::new();
    let file = job.dir.path().join("exits.txt");
    std::fs::write(&file, "185.220.101.1\n").unwrap();
    let sources = lists_record(
        &job,
        json!([{"name": "tor", "generator": "tor", "sources": [file]}]),
    );
    let api = Server::start(vec![
        configmap(json!({"tor.txt": "185.220.101.1/32\n", "version": "v7"})),
        wasmplugin("v7"),
    ])
    .unwrap();
    let out = job.run_ok(&api, &sources);
    assert!(stderr(&out).contains("unchanged since version v7"));
    assert_eq!(api.requests().len(), 2);
}

#[test]
fn a_list_name_the_filter_would_refuse_is_refused_before_any_request() {
    // The filter refuses every update that carries such a name (1 to 32 of [a-z0-9_-], at most
    // 16 lists): refused here, exit 2, naming the field, and the API is never called.
    let job = Job::new();
    let long = "a".repeat(33);
    let cases =
        [
            (
                json!([{"name": long, "generator": "tor", "sources": ["/x"]}]),
                "lists[0].name",
            ),
            (
                json!((0..17)
                .map(|i| json!({"name": format!("l{i}"), "generator": "tor", "sources": ["/x"]}))
                .collect::<Vec<_>>()),
                "lists: 17 lists, the filter takes at most 16",
            ),
        ];
    for (lists, field) in cases {
        let sources = lists_record(&job, lists);
        let api = Server::start(vec![configmap(json!({}))]).unwrap();
        let out = job.run(&api, &sources);
        let log = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{log}");
        assert!(log.contains(field), "{log}");
        assert!(log.contains("sources.json"), "names the file: {log}");
        assert!(api.requests().is_empty(), "nothing may reach the API");
    }
}

/// The run failed (exit 1) because the tor list fell from the capture's 1305 exits to 100; its
/// log.
fn tor_refused_for_its_shrink(out: &Output) -> String {
    let log = failure_log(out);
    assert!(
        log.contains("list tor: refused, IPv4 prefixes fell from 1305 to 100"),
        "{log}"
    );
    log
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).unwrap().lines().count()
}

#[test]
fn the_out_dir_gets_each_list_and_a_refused_one_keeps_its_previous_file() {
    let test = "the_out_dir_gets_each_list_and_a_refused_one_keeps_its_previous_file";
    let Some((bulk, slice)) = bulk_and_slice(test) else {
        return;
    };
    let job = Job::new();
    let exits = job.dir.path().join("exits.txt");
    std::fs::copy(&bulk, &exits).unwrap();
    let sources = lists_record(
        &job,
        json!([
            {"name": "tor", "generator": "tor", "sources": [exits]},
            {"name": "hosting", "generator": "asn", "sources": [slice], "asns": [13335]},
        ]),
    );
    let dir = job.dir.path().join("lists");
    let out = job.run_into(&dir, &sources);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        summary,
        json!({"out_dir": dir, "regenerated": ["tor", "hosting"], "kept": [], "failed": []})
    );
    // One CIDR per line, the form the CronJob publishes.
    let tor = std::fs::read_to_string(dir.join("tor.txt")).unwrap();
    assert_eq!(tor.lines().count(), 1305);
    assert!(tor.lines().all(|l| l.ends_with("/32")));
    assert!(
        std::fs::read_to_string(dir.join("hosting.txt"))
            .unwrap()
            .lines()
            .any(|l| l == "1.1.1.0/24")
    );

    // The exits shrink to 100 (beyond the 50 % allowed against the previous tor.txt): tor keeps
    // its file, hosting is written again, the run fails naming tor.
    std::fs::write(&exits, testkit::first_lines(&bulk, 100)).unwrap();
    std::fs::remove_file(dir.join("hosting.txt")).unwrap();
    let out = job.run_into(&dir, &sources);
    let log = tor_refused_for_its_shrink(&out);
    assert!(
        log.contains("these failed: tor (lists-gen-tor exited with 1; keeps its previous version)"),
        "{log}"
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        summary,
        json!({"out_dir": dir, "regenerated": ["hosting"], "kept": ["tor"], "failed": []})
    );
    assert_eq!(lines(&dir.join("tor.txt")), 1305);
    assert!(lines(&dir.join("hosting.txt")) > 0);
    assert_eq!(
        testkit::file_names(&dir),
        ["hosting.txt", "tor.txt"],
        "no temporary file is left"
    );
}

#[test]
fn an_out_dir_run_where_every_list_fails_writes_nothing() {
    let job = Job::new();
    let missing = job.dir.path().join("no-such-capture.txt");
    let sources = lists_record(
        &job,
        json!([{"name": "tor", "generator": "tor", "sources": [missing]}]),
    );
    let dir = job.dir.path().join("lists");
    let log = failure_log(&job.run_into(&dir, &sources));
    assert!(log.contains("every list failed"), "{log}");
    assert!(!dir.exists(), "nothing written, nothing created");
}

/// A list the filter would refuse (here a kept list edited by hand in the ConfigMap) is refused
/// before anything is written: Envoy would reject the new pluginConfig and keep running the old
/// one, lists included, with nothing the job could see.
#[test]
fn lists_the_filter_would_refuse_are_refused_before_any_write() {
    let job = Job::new();
    let file = job.dir.path().join("exits.txt");
    std::fs::write(&file, "185.220.101.1\n").unwrap();
    let missing = job.dir.path().join("gone.txt");
    let sources = lists_record(
        &job,
        json!([
            {"name": "tor", "generator": "tor", "sources": [file]},
            {"name": "hosting", "generator": "tor", "sources": [missing]},
        ]),
    );
    let api = Server::start(vec![
        configmap(json!({"hosting.txt": "203.0.113.0/24\nsee the wiki\n", "version": NOW})),
        wasmplugin(NOW),
    ])
    .unwrap();
    let log = job.run_failing(&api, &sources);
    assert!(
        log.contains("the filter would refuse list hosting"),
        "{log}"
    );
    assert!(log.contains("`see` is not a CIDR"), "{log}");
    assert!(log.contains("nothing was written"), "{log}");
    // Refused as it is packed, before the WasmPlugin is even read.
    let requests = api.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_get(&requests[0], CM);
}

const CRAWLERS: &str = "bots/crawler-ip-ranges";

/// The WasmPlugin's packed list `name` holds the prefixes of this text.
fn assert_packed_as(lists: &Value, name: &str, text: &Value) {
    let packed = lists["packed"][name]
        .as_str()
        .unwrap_or_else(|| panic!("no packed {name}: {lists}"));
    let unpacked = pow_core::packed::decode(packed, pow_core::packed::MAX_PREFIXES).unwrap();
    let text = pow_core::lists::parse_set(text.as_str().unwrap()).unwrap();
    assert_eq!(in_packed_order(unpacked), in_packed_order(text), "{name}");
}

/// A crawler capture's list as lists-gen-crawlers writes it (one CIDR per line).
fn crawler_text(file: &Path) -> String {
    let out = Command::new(workspace::bin("lists-gen-crawlers"))
        .args(["--token=Bot", "-o", "text"])
        .arg(file)
        .env_remove("EDGEPOP_LOG")
        .output()
        .unwrap();
    testkit::process::success_stdout(&out)
}

#[test]
fn crawler_lists_are_applied_with_their_tokens_in_the_wasmplugin_only() {
    let test = "crawler_lists_are_applied_with_their_tokens_in_the_wasmplugin_only";
    let Some(bots) = workspace::fixture(test, CRAWLERS) else {
        return;
    };
    let job = Job::new();
    let google = Server::start(vec![Reply::json(
        200,
        std::fs::read(bots.join("google/googlebot.json")).unwrap(),
    )])
    .unwrap();
    let fetchers = ["AdsBot-Google", "FeedFetcher-Google"];
    let sources = lists_record(
        &job,
        json!([
            {"name": "googlebot", "generator": "crawlers",
             "sources": [format!("{}/static/crawling/ipranges/common-crawlers.json", google.url)],
             "tokens": ["Googlebot"]},
            {"name": "google-fetchers", "generator": "crawlers",
             "sources": [bots.join("google/user-triggered-fetchers.json"),
                         bots.join("google/user-triggered-fetchers-google.json")],
             "tokens": fetchers},
            {"name": "bingbot", "generator": "crawlers",
             "sources": [bots.join("bing/bingbot.json")], "tokens": ["bingbot"]},
        ]),
    );
    let api = apply_conversation(json!({}), "older");
    job.run_ok(&api, &sources);
    let (cm, wasm) = applied(&api);
    // The ConfigMap holds the prefixes only: the tokens come from the sources every run.
    assert_eq!(
        data_keys(&cm),
        [
            "bingbot.txt",
            "generated_at",
            "google-fetchers.txt",
            "googlebot.txt",
            "version"
        ]
    );
    let data = &cm["data"];
    // 45 IPv4 and 27 IPv6 prefixes once Googlebot's 165 and 142 are aggregated.
    assert_eq!(
        data["googlebot.txt"].as_str().unwrap().lines().count(),
        45 + 27
    );
    assert_eq!(
        data["google-fetchers.txt"]
            .as_str()
            .unwrap()
            .lines()
            .count(),
        133 + 164
    );

    let lists = &wasm["spec"]["pluginConfig"]["lists"];
    assert_eq!(
        lists["tokens"],
        json!({"bingbot": ["bingbot"], "google-fetchers": fetchers, "googlebot": ["Googlebot"]})
    );
    assert_packed_as(lists, "googlebot", &data["googlebot.txt"]);
    assert_packed_as(lists, "bingbot", &data["bingbot.txt"]);
    // What was applied is what the filter takes.
    let config = serde_json::to_vec(&wasm["spec"]["pluginConfig"]).unwrap();
    let decoded = pow_core::PluginConfig::from_json(&config).unwrap();
    assert_eq!(decoded.lists.unwrap().tokens["googlebot"], ["Googlebot"]);
}

#[test]
fn a_failing_or_shrinking_crawler_list_keeps_its_last_version_and_its_tokens() {
    let test = "a_failing_or_shrinking_crawler_list_keeps_its_last_version_and_its_tokens";
    let Some(bots) = workspace::fixture(test, CRAWLERS) else {
        return;
    };
    let job = Job::new();
    let down = Server::start(vec![Reply::status(500)]).unwrap();
    let down_url = format!("{}/static/crawling/ipranges/common-crawlers.json", down.url);
    let old_googlebot = "66.249.64.0/19\n2001:4860:4801::/48\n";
    // The last chatgpt-user list; its source now serves GPTBot's 12 prefixes instead of 154.
    let old_chatgpt = crawler_text(&bots.join("openai/chatgpt-user.json"));
    let sources = lists_record(
        &job,
        json!([
            {"name": "googlebot", "generator": "crawlers", "sources": [down_url],
             "tokens": ["Googlebot"]},
            {"name": "chatgpt-user", "generator": "crawlers",
             "sources": [bots.join("openai/gptbot.json")], "tokens": ["ChatGPT-User"]},
            {"name": "oai-searchbot", "generator": "crawlers",
             "sources": [bots.join("openai/searchbot.json")], "tokens": ["OAI-SearchBot"]},
            {"name": "bingbot", "generator": "crawlers",
             "sources": [job.dir.path().join("no-bingbot.json")], "tokens": ["bingbot"]},
        ]),
    );
    let api = apply_conversation(
        json!({"googlebot.txt": old_googlebot, "chatgpt-user.txt": old_chatgpt,
                         "version": "v0"}),
        "v0",
    );
    let out = job.run(&api, &sources);
    let log = failure_log(&out);
    assert!(
        log.contains(&format!(
            "lists-gen-crawlers: error: source {down_url}: HTTP status 500"
        )),
        "{log}"
    );
    assert!(
        log.contains("list chatgpt-user: refused, IPv4 prefixes fell from 154 to 12"),
        "{log}"
    );
    assert!(
        log.contains(
            "these failed: \
             googlebot (lists-gen-crawlers exited with 1; keeps its previous version), \
             chatgpt-user (lists-gen-crawlers exited with 1; keeps its previous version), \
             bingbot (lists-gen-crawlers exited with 2; has no previous version: nothing is \
             written for it)"
        ),
        "{log}"
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["kept"], json!(["googlebot", "chatgpt-user"]));
    assert_eq!(summary["regenerated"], json!(["oai-searchbot"]));

    let (cm, wasm) = applied(&api);
    assert_eq!(cm["data"]["googlebot.txt"], old_googlebot);
    assert_eq!(cm["data"]["chatgpt-user.txt"], old_chatgpt.as_str());
    let lists = &wasm["spec"]["pluginConfig"]["lists"];
    assert_packed_as(lists, "googlebot", &json!(old_googlebot));
    assert_packed_as(lists, "chatgpt-user", &json!(old_chatgpt));
    // The kept lists keep their tokens; bingbot, with nothing to keep, has neither set nor
    // tokens (the filter refuses tokens of a list it does not have).
    assert_eq!(
        lists["tokens"],
        json!({"chatgpt-user": ["ChatGPT-User"], "googlebot": ["Googlebot"],
               "oai-searchbot": ["OAI-SearchBot"]})
    );
    assert!(lists["packed"].get("bingbot").is_none());
}

#[test]
fn tokens_new_to_the_wasmplugin_are_written_even_when_no_list_changed() {
    let test = "tokens_new_to_the_wasmplugin_are_written_even_when_no_list_changed";
    let Some(bots) = workspace::fixture(test, CRAWLERS) else {
        return;
    };
    let job = Job::new();
    let gptbot = bots.join("openai/gptbot.json");
    let text = crawler_text(&gptbot);
    let sources = lists_record(
        &job,
        json!([
            {"name": "gptbot", "generator": "crawlers", "sources": [gptbot], "tokens": ["GPTBot"]},
        ]),
    );
    // The same list and version as published, by a job that wrote no tokens.
    let api = apply_conversation(json!({"gptbot.txt": text, "version": "v7"}), "v7");
    let out = job.run_ok(&api, &sources);
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["changed"], true);
    assert_eq!(summary["version"], NOW);
    let (cm, wasm) = applied(&api);
    assert_eq!(cm["data"]["version"], NOW);
    let lists = &wasm["spec"]["pluginConfig"]["lists"];
    assert_eq!(lists["version"], NOW);
    assert_eq!(lists["tokens"], json!({"gptbot": ["GPTBot"]}));

    // Next run: the WasmPlugin has them; nothing to write.
    let api = Server::start(vec![
        configmap(json!({"gptbot.txt": text, "version": NOW})),
        Reply::json(
            200,
            json!({"apiVersion": "extensions.istio.io/v1alpha1", "kind": "WasmPlugin",
                   "metadata": {"name": "pow-filter", "namespace": "edge"},
                   "spec": {"pluginConfig": {"lists": {"version": NOW, "sets": {"gptbot": text},
                                                       "tokens": {"gptbot": ["GPTBot"]}}}}})
            .to_string(),
        ),
    ])
    .unwrap();
    let out = job.run_ok(&api, &sources);
    assert!(stderr(&out).contains(&format!("unchanged since version {NOW}")));
    assert_eq!(api.requests().len(), 2);
}
