//! `pow-demo explain` as an operator runs it: the example edge config, a folder of lists, request
//! descriptions on stdin; one JSON answer per line, decided by the real release module.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;
use common::workspace;

fn explain(wasm: &Path, config: &Path, lists: &Path, stdin: &str) -> Output {
    run(wasm, config, lists, &[], stdin)
}

/// [`explain`] given `--agent-directory <agent>=<file>`.
fn explain_with_directory(
    wasm: &Path,
    config: &Path,
    lists: &Path,
    agent_file: &str,
    stdin: &str,
) -> Output {
    run(
        wasm,
        config,
        lists,
        &["--agent-directory", agent_file],
        stdin,
    )
}

fn run(wasm: &Path, config: &Path, lists: &Path, extra: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pow-demo"))
        .arg("--wasm")
        .arg(wasm)
        .arg("explain")
        .arg("--config")
        .arg(config)
        .arg("--lists")
        .arg(lists)
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The JSON lines of a successful run.
fn answers(out: Output) -> Vec<serde_json::Value> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The stderr of a run refused as a usage error (exit 2).
#[track_caller]
fn usage_error(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    stderr
}

/// Lists as `make lists` writes them: one CIDR a line.
fn lists() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tor.txt"), "185.220.101.0/24\n").unwrap();
    std::fs::write(dir.path().join("hosting.txt"), "203.0.113.0/24\n").unwrap();
    dir
}

#[test]
fn explain_says_which_rule_decides_each_request() {
    let test = "explain_says_which_rule_decides_each_request";
    let Some(wasm) = testkit::workspace::filter_module(test) else {
        return;
    };
    let lists = lists();
    let config = workspace().join("config/edge-pow.example.json");
    let requests = [
        r#"{"host": "edge.example.com", "address": "185.220.101.7", "headers": {"accept": "text/html"}}"#,
        r#"{"host": "edge.example.com", "address": "203.0.113.5"}"#,
        r#"{"host": "edge.example.com", "path": "/healthz?x=1", "address": "185.220.101.7"}"#,
        "",
        r#"{"method": "POST", "host": "edge.example.com", "path": "/", "address": "8.8.8.8"}"#,
    ];
    let out = explain(&wasm, &config, lists.path(), &requests.join("\n"));
    let answers = answers(out);
    assert_eq!(
        answers,
        [
            serde_json::json!({"rule": "list.tor", "action": "challenged", "difficulty": 20, "kind": "pow", "status": 403}),
            serde_json::json!({"rule": "list.hosting", "action": "challenged", "difficulty": 16, "kind": "pow", "status": 403}),
            serde_json::json!({"rule": "bypass", "action": "allowed", "status": null}),
            serde_json::json!({"rule": "default", "action": "allowed", "status": null}),
        ]
    );
}

#[test]
fn explain_refuses_what_it_cannot_read_naming_it() {
    let test = "explain_refuses_what_it_cannot_read_naming_it";
    let Some(wasm) = testkit::workspace::filter_module(test) else {
        return;
    };
    let config = workspace().join("config/edge-pow.example.json");
    // A list the sources name is missing.
    let empty = tempfile::tempdir().unwrap();
    let out = explain(&wasm, &config, empty.path(), "");
    let stderr = usage_error(&out);
    assert!(
        stderr.contains("tor.txt") && stderr.contains("make lists"),
        "{stderr}"
    );
    // A bad line: named, and nothing printed for it.
    let lists = lists();
    let lines = concat!(
        r#"{"host": "h", "address": "8.8.8.8"}"#,
        "\n",
        r#"{"host": "h", "address": "not-an-address"}"#
    );
    let out = explain(&wasm, &config, lists.path(), lines);
    let stderr = usage_error(&out);
    assert!(
        stderr.contains("stdin line 2") && stderr.contains("address"),
        "{stderr}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    // A rule the filter would refuse, named.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("edge.json");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        r#""mode": "listed","#,
        r#""mode": "listed", "rules": [{"name": "x", "path": ["/a;b"], "action": "allow"}],"#,
    );
    std::fs::write(&bad, text).unwrap();
    let out = explain(&wasm, &bad, lists.path(), "");
    let stderr = usage_error(&out);
    assert!(stderr.contains("rules[0].path[0]"), "{stderr}");
}

/// What the README's table says a row meets, as explain's answer would be written there.
fn meets(answer: &serde_json::Value) -> String {
    let rule = answer["rule"].as_str().unwrap();
    let action = answer["action"].as_str().unwrap();
    match (action, answer["kind"].as_str()) {
        ("challenged", Some("pow")) => {
            format!("`{rule}`: challenged (pow, {} bits)", answer["difficulty"])
        }
        ("challenged", Some(kind)) => format!("`{rule}`: challenged ({kind})"),
        _ => format!("`{rule}`: {action}"),
    }
}

/// filter/README.md's table of what each visitor meets with the example a site would deploy is
/// what the real module decides, row by row, with the crawler ranges as their operators publish
/// them.
#[test]
fn the_readme_table_is_what_explain_says() {
    let test = "the_readme_table_is_what_explain_says";
    let Some(wasm) = testkit::workspace::filter_module(test) else {
        return;
    };
    let Some(shared) = testkit::workspace::shared_dir(test) else {
        return;
    };
    let readme = std::fs::read_to_string(workspace().join("filter/README.md")).unwrap();
    let start = readme
        .find("<!-- explain-table: config/edge-site.example.json -->")
        .unwrap();
    let end = readme[start..].find("<!-- /explain-table -->").unwrap() + start;
    let rows: Vec<(String, String)> = readme[start..end]
        .lines()
        .filter(|l| l.starts_with("| ") && l.contains("| `{"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            (cells[1].trim_matches('`').to_owned(), cells[2].to_owned())
        })
        .collect();
    assert!(rows.len() >= 8, "the table lost its rows: {rows:?}");
    let ranges = shared.join("fixtures/bots/crawler-ip-ranges");
    let lists = lists();
    let write = |name: &str, text: String| {
        std::fs::write(lists.path().join(format!("{name}.txt")), text).unwrap();
    };
    for (name, files) in [
        ("googlebot", &["google/googlebot.json"][..]),
        ("google-special", &["google/special-crawlers.json"]),
        (
            "google-fetchers",
            &[
                "google/user-triggered-fetchers.json",
                "google/user-triggered-fetchers-google.json",
            ],
        ),
        ("bingbot", &["bing/bingbot.json"]),
        ("gptbot", &["openai/gptbot.json"]),
        ("oai-searchbot", &["openai/searchbot.json"]),
        ("chatgpt-user", &["openai/chatgpt-user.json"]),
    ] {
        write(
            name,
            files
                .iter()
                .map(|f| testkit::crawler_ranges::as_list(&ranges.join(f)))
                .collect(),
        );
    }
    let config = workspace().join("config/edge-site.example.json");
    let stdin: Vec<&str> = rows.iter().map(|(request, _)| request.as_str()).collect();
    let out = explain(&wasm, &config, lists.path(), &stdin.join("\n"));
    let answers = answers(out);
    assert_eq!(answers.len(), rows.len());
    for ((request, expected), answer) in rows.iter().zip(&answers) {
        assert_eq!(&meets(answer), expected, "{request}");
    }
}

/// An edge config trusting `examplebot` by its directory's URL, with a rule letting its signed
/// requests through before the lists are looked at.
fn with_examplebot(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(workspace().join("config/edge-pow.example.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&text).unwrap();
    config["pow"]["agents"] = serde_json::json!([{"name": "examplebot",
        "directory": "https://bot.example.com/.well-known/http-message-signatures-directory"}]);
    config["pow"]["plugin_config"]["rules"] =
        serde_json::json!([{"name": "signed", "signed_agent": ["examplebot"], "action": "allow"}]);
    let path = dir.join("edge.json");
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

/// A request signed by the agent (the RFC 9421 test key, signing now as an agent does) is decided
/// with the keys of its directory file, as the draft prints that directory; unsigned, the same
/// visitor meets the lists.
#[test]
fn explain_decides_a_signed_request_with_keys_from_a_directory_file() {
    let test = "explain_decides_a_signed_request_with_keys_from_a_directory_file";
    let Some(wasm) = testkit::workspace::filter_module(test) else {
        return;
    };
    let (Some(shared), Some(key)) = (
        testkit::workspace::shared_dir(test),
        testkit::key_directory::AgentKey::rfc9421(test),
    ) else {
        return;
    };
    let directory = shared.join("fixtures/bots/web-bot-auth-drafts/dir05-key-directory.json");
    let lists = lists();
    let config = with_examplebot(lists.path());
    let now = testkit::key_directory::unix_now();
    let headers: serde_json::Map<String, serde_json::Value> = key
        .sign_request("edge.example.com", now, 60)
        .into_iter()
        .map(|(n, v)| (n, serde_json::Value::String(v)))
        .collect();
    let signed = serde_json::json!({"host": "edge.example.com", "address": "185.220.101.7",
                                    "headers": headers});
    let unsigned = r#"{"host": "edge.example.com", "address": "185.220.101.7"}"#;
    let flag = format!("examplebot={}", directory.display());
    let out = explain_with_directory(
        &wasm,
        &config,
        lists.path(),
        &flag,
        &format!("{signed}\n{unsigned}\n"),
    );
    assert_eq!(
        answers(out),
        [
            serde_json::json!({"rule": "signed", "action": "allowed", "status": null}),
            serde_json::json!({"rule": "list.tor", "action": "challenged", "difficulty": 20, "kind": "pow", "status": 403}),
        ]
    );
    // Without the flag, the file `make lists` writes beside the lists is read.
    std::fs::copy(&directory, lists.path().join("examplebot.directory.json")).unwrap();
    let out = explain(&wasm, &config, lists.path(), &format!("{signed}\n"));
    assert_eq!(answers(out)[0]["rule"], "signed");
}

#[test]
fn explain_names_a_missing_or_unknown_agent_directory() {
    let test = "explain_names_a_missing_or_unknown_agent_directory";
    let Some(wasm) = testkit::workspace::filter_module(test) else {
        return;
    };
    let lists = lists();
    let config = with_examplebot(lists.path());
    let out = explain(&wasm, &config, lists.path(), "");
    let stderr = usage_error(&out);
    testkit::process::assert_says_all(
        &stderr,
        &[
            "agent `examplebot`",
            "--agent-directory examplebot=FILE",
            "make lists",
        ],
    );
    let out = explain_with_directory(&wasm, &config, lists.path(), "otherbot=x.json", "");
    let stderr = usage_error(&out);
    assert!(
        stderr.contains("no agent `otherbot` in pow.agents"),
        "{stderr}"
    );
    // A directory the filter refuses is named by the filter's decoder.
    let bad = lists.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "AAAA"}]}"#,
    )
    .unwrap();
    let flag = format!("examplebot={}", bad.display());
    let out = explain_with_directory(&wasm, &config, lists.path(), &flag, "");
    let stderr = usage_error(&out);
    assert!(
        stderr.contains("agents.examplebot.keys.keys[0].x"),
        "{stderr}"
    );
}
