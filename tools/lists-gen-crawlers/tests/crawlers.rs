//! lists-gen-crawlers over the real captures of the operators' range files in
//! ../shared/fixtures/bots/crawler-ip-ranges (PROVENANCE.md there), from files, stdin and over
//! loopback HTTP: the prefixes read are the counts PROVENANCE gives, the list is what Python's
//! ipaddress collapses them to (tests/oracle.py), the record carries the tokens; and every
//! refusal: nothing on stdout, a non-zero exit, the source and the field named.
//!
//! What the aggregation changes: the operators publish many adjacent prefixes (Googlebot's 165
//! IPv4 prefixes are mostly consecutive /27s), which the list merges into the fewest prefixes
//! covering the same addresses (45 for those 165). The addresses are exactly the same; only the
//! number of prefixes shrinks, and no file here has a duplicate or a host bit set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lists_core::records::{ListGenerator, PolicyList};
use testkit::http::{Reply, Server};
use testkit::{process, workspace};

const BIN: &str = env!("CARGO_BIN_EXE_lists-gen-crawlers");

fn gen_crawlers(args: &[&str]) -> Output {
    command(args).output().unwrap()
}

fn command(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command.args(args).env_remove("EDGEPOP_LOG");
    command
}

fn capture(test: &str, rel: &str) -> Option<PathBuf> {
    workspace::fixture(test, &format!("bots/crawler-ip-ranges/{rel}"))
}

fn oracle(files: &[&Path]) -> String {
    workspace::python_oracle(env!("CARGO_MANIFEST_DIR"), files)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `rel` read from its file (text) and served over HTTP (record): the prefixes read are `read`
/// (IPv4, IPv6: PROVENANCE's counts), the list is Python's collapse of them, `aggregated` long.
fn equals_python(test: &str, rel: &str, read: (usize, usize), aggregated: (usize, usize)) {
    let Some(file) = capture(test, rel) else {
        return;
    };
    if !workspace::python3(test) {
        return;
    }
    let expected = oracle(&[&file]);
    let path = file.to_str().unwrap();
    let out = gen_crawlers(&["--token=Bot", "-o", "text", path]);
    assert_eq!(process::success_stdout(&out), expected, "{rel} from a file");
    let log = stderr(&out);
    assert!(
        log.contains(&format!("source {path}: created 20"))
            && log.contains(&format!("{} IPv4 and {} IPv6 prefixes\n", read.0, read.1)),
        "{log}"
    );

    let server = Server::start(vec![Reply::json(200, std::fs::read(&file).unwrap())]).unwrap();
    let url = format!("{}/{rel}", server.url);
    let record: PolicyList = serde_json::from_str(&process::success_stdout(&gen_crawlers(&[
        "--token=Bot",
        &url,
    ])))
    .unwrap();
    assert!(record.problems().is_empty(), "{:?}", record.problems());
    assert_eq!(record.to_text(), expected, "{rel} over HTTP");
    assert_eq!(
        (record.counts.ipv4, record.counts.ipv6),
        aggregated,
        "{rel}"
    );
    assert_eq!(record.sources, [url]);
}

#[test]
fn googlebot_gives_its_165_ipv4_and_142_ipv6_prefixes_aggregated() {
    equals_python(
        "googlebot_gives_its_165_ipv4_and_142_ipv6_prefixes_aggregated",
        "google/googlebot.json",
        (165, 142),
        (45, 27),
    );
}

#[test]
fn googles_special_crawlers_give_their_prefixes_aggregated() {
    equals_python(
        "googles_special_crawlers_give_their_prefixes_aggregated",
        "google/special-crawlers.json",
        (132, 132),
        (23, 26),
    );
}

#[test]
fn googles_user_triggered_fetchers_give_their_prefixes_aggregated() {
    let test = "googles_user_triggered_fetchers_give_their_prefixes_aggregated";
    equals_python(
        test,
        "google/user-triggered-fetchers.json",
        (464, 464),
        (96, 113),
    );
    equals_python(
        test,
        "google/user-triggered-fetchers-google.json",
        (219, 219),
        (37, 51),
    );
}

#[test]
fn bingbot_gives_its_28_ipv4_prefixes_none_adjacent() {
    equals_python(
        "bingbot_gives_its_28_ipv4_prefixes_none_adjacent",
        "bing/bingbot.json",
        (28, 0),
        (28, 0),
    );
}

#[test]
fn openais_three_crawlers_give_their_ipv4_prefixes_aggregated() {
    let test = "openais_three_crawlers_give_their_ipv4_prefixes_aggregated";
    equals_python(test, "openai/gptbot.json", (15, 0), (12, 0));
    equals_python(test, "openai/searchbot.json", (24, 0), (23, 0));
    // Served minified, on one line.
    equals_python(test, "openai/chatgpt-user.json", (167, 0), (154, 0));
}

#[test]
fn two_sources_merge_into_one_list_with_its_tokens() {
    let test = "two_sources_merge_into_one_list_with_its_tokens";
    let (Some(cloud), Some(google)) = (
        capture(test, "google/user-triggered-fetchers.json"),
        capture(test, "google/user-triggered-fetchers-google.json"),
    ) else {
        return;
    };
    if !workspace::python3(test) {
        return;
    }
    let out = gen_crawlers(&[
        "--list-name=google-fetchers",
        "--token=FeedFetcher-Google",
        "--token=Google-Read-Aloud",
        "--token=Google-Site-Verification",
        cloud.to_str().unwrap(),
        google.to_str().unwrap(),
    ]);
    let text = process::success_stdout(&out);
    let record: PolicyList = serde_json::from_str(&text).unwrap();
    assert!(record.problems().is_empty(), "{:?}", record.problems());
    assert_eq!(record.to_text(), oracle(&[&cloud, &google]));
    // 683 + 683 prefixes read, none shared by the two files; 133 + 164 once aggregated.
    assert_eq!((record.counts.ipv4, record.counts.ipv6), (133, 164));
    assert_eq!(record.name, "google-fetchers");
    assert_eq!(record.generator, ListGenerator::Crawlers);
    assert_eq!(
        record.tokens,
        [
            "FeedFetcher-Google",
            "Google-Read-Aloud",
            "Google-Site-Verification"
        ]
    );
    assert_eq!(record.sources.len(), 2);
    // The record as written: version 2, the generator and the tokens by name.
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["version"], 2);
    assert_eq!(json["generator"], "crawlers");
    assert_eq!(json["tokens"][1], "Google-Read-Aloud");
    assert!(json.get("asns").is_none());
}

#[test]
fn stdin_is_read_as_a_file_is() {
    let test = "stdin_is_read_as_a_file_is";
    let Some(file) = capture(test, "openai/gptbot.json") else {
        return;
    };
    let bytes = std::fs::read(&file).unwrap();
    let from_file = process::success_stdout(&gen_crawlers(&[
        "--token=GPTBot",
        "-o",
        "text",
        file.to_str().unwrap(),
    ]));
    let out = process::run_with_stdin(&mut command(&["--token=GPTBot", "-o", "text", "-"]), &bytes);
    assert_eq!(process::success_stdout(&out), from_file);
    assert!(stderr(&out).contains("source -: created 2025-10-03T11:51:00.000000, 15 IPv4"));
    // With no source at all, stdin is the source.
    let out = process::run_with_stdin(&mut command(&["--token=GPTBot"]), &bytes);
    let record: PolicyList = serde_json::from_str(&process::success_stdout(&out)).unwrap();
    assert_eq!(
        (record.sources.as_slice(), record.counts.ipv4),
        (&["-".to_string()][..], 12)
    );
    assert_eq!(record.tokens, ["GPTBot"]);
    assert_eq!(record.name, "crawlers");
}

#[test]
fn host_bits_are_cleared_with_a_warning() {
    let (_dir, file) = testkit::temp_file(
        "bot.json",
        r#"{"creationTime": "2026-01-01T00:00:00", "prefixes": [{"ipv4Prefix": "66.249.64.1/27"},
            {"ipv4Prefix": "66.249.64.32/27"}, {"ipv6Prefix": "2001:db8::1/64"}]}"#,
    );
    let out = gen_crawlers(&["--token=Bot", "-o", "text", file.to_str().unwrap()]);
    assert_eq!(
        process::success_stdout(&out),
        "66.249.64.0/26\n2001:db8::/64\n"
    );
    assert!(
        stderr(&out).contains("2 prefix(es) with host bits set, cleared (first: 66.249.64.1/27)"),
        "{}",
        stderr(&out)
    );
}

/// A local file in the wrong shape: exit 2, nothing written, the file and the field named.
#[test]
fn each_bad_file_is_refused_naming_the_source_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("empty.json", "", "is empty"),
        (
            "portal.json",
            "<!DOCTYPE html><html><body>Sign in</body></html>",
            "not a published IP range file",
        ),
        (
            "noprefixes.json",
            r#"{"creationTime": "t", "syncToken": "1"}"#,
            "`prefixes` is missing",
        ),
        (
            "notime.json",
            r#"{"prefixes": [{"ipv4Prefix": "66.249.64.0/27"}]}"#,
            "`creationTime` is missing",
        ),
        (
            "none.json",
            r#"{"creationTime": "t", "prefixes": []}"#,
            "holds no prefix: `prefixes` is empty",
        ),
        (
            "badprefix.json",
            r#"{"creationTime": "t", "prefixes": [{"ipv4Prefix": "66.249.64.0/27"},
                {"ipv4Prefix": "66.249.64.0/27"}, {"ipv4Prefix": "66.249.300.0/27"}]}"#,
            "prefixes[2].ipv4Prefix: `66.249.300.0/27` is not an IPv4 prefix",
        ),
        (
            "family.json",
            r#"{"creationTime": "t", "prefixes": [{"ipv6Prefix": "66.249.64.0/27"}]}"#,
            "prefixes[0].ipv6Prefix: `66.249.64.0/27` is not an IPv6 prefix",
        ),
        (
            "neither.json",
            r#"{"creationTime": "t", "prefixes": [{"ipPrefix": "66.249.64.0/27"}]}"#,
            "prefixes[0] has neither `ipv4Prefix` nor `ipv6Prefix`",
        ),
    ];
    for (name, body, why) in cases {
        let file = dir.path().join(name);
        std::fs::write(&file, body).unwrap();
        let path = file.to_str().unwrap();
        let out = gen_crawlers(&["--token=Googlebot", path]);
        process::assert_refused(&out, 2, &[&format!("source {path}: {why}")]);
    }
}

#[test]
fn a_bad_second_source_writes_nothing_of_the_first() {
    let test = "a_bad_second_source_writes_nothing_of_the_first";
    let Some(good) = capture(test, "bing/bingbot.json") else {
        return;
    };
    let (_dir, bad) = testkit::temp_file(
        "bad.json",
        r#"{"creationTime": "t", "prefixes": [{"ipv4Prefix": "x"}]}"#,
    );
    for output in ["json", "text"] {
        let out = gen_crawlers(&[
            "--token=bingbot",
            "-o",
            output,
            good.to_str().unwrap(),
            bad.to_str().unwrap(),
        ]);
        process::assert_refused(
            &out,
            2,
            &[&format!(
                "source {}: prefixes[0].ipv4Prefix: `x` is not an IPv4 prefix",
                bad.display()
            )],
        );
    }
}

#[test]
fn tokens_are_required_and_checked_by_the_filters_rule() {
    let out = gen_crawlers(&["/x.json"]);
    process::assert_refused(&out, 2, &["no User-Agent token given: use --token"]);
    let out = gen_crawlers(&["--token=Googlebot", "--token=Google bot", "/x.json"]);
    process::assert_refused(
        &out,
        2,
        &["--token `Google bot`: a User-Agent token is 1 to 64 bytes of visible ASCII"],
    );
}

#[test]
fn remote_sources_down_failing_cut_or_serving_html_are_failures_naming_them() {
    let down = format!("{}/gptbot.json", testkit::http::closed_port_url().unwrap());
    process::assert_refused(
        &gen_crawlers(&["--token=GPTBot", &down]),
        1,
        &[&format!("source {down}: unreachable")],
    );
    let json = br#"{"creationTime": "t", "prefixes": [{"ipv4Prefix": "52.230.152.0/24"}]}"#;
    let server = Server::start(vec![
        Reply::status(503),
        Reply::Cut {
            declared: json.len(),
            body: json[..30].to_vec(),
        },
        Reply::ok("<html><body>Just a moment...</body></html>\n"),
        Reply::Stall,
    ])
    .unwrap();
    let url = format!("{}/gptbot.json", server.url);
    process::assert_refused(
        &gen_crawlers(&["--token=GPTBot", &url]),
        1,
        &[&format!("source {url}: HTTP status 503")],
    );
    process::assert_refused(
        &gen_crawlers(&["--token=GPTBot", &url]),
        1,
        &[&format!("source {url}: ends early")],
    );
    // HTML served for the file: the remote source failed (exit 1), as one that is down.
    process::assert_refused(
        &gen_crawlers(&["--token=GPTBot", &url]),
        1,
        &[&format!("source {url}: not a published IP range file")],
    );
    process::assert_refused(
        &gen_crawlers(&["--token=GPTBot", "--timeout=1", &url]),
        1,
        &["timed out after 1 s"],
    );
}

#[test]
fn a_large_shrink_is_refused_unless_forced() {
    let test = "a_large_shrink_is_refused_unless_forced";
    let Some(file) = capture(test, "google/googlebot.json") else {
        return;
    };
    let (dir, previous) = testkit::temp_file(
        "googlebot.txt",
        process::success_stdout(&gen_crawlers(&[
            "--token=Googlebot",
            "-o",
            "text",
            file.to_str().unwrap(),
        ])),
    );
    let small = dir.path().join("small.json");
    std::fs::write(
        &small,
        r#"{"creationTime": "t", "prefixes": [{"ipv4Prefix": "66.249.64.0/27"},
            {"ipv6Prefix": "2001:4860:4801:10::/64"}]}"#,
    )
    .unwrap();
    let prev = format!("--previous={}", previous.display());
    let args = ["--token=Googlebot", "--list-name=googlebot", &prev];
    let mut refused = args.to_vec();
    refused.push(small.to_str().unwrap());
    process::assert_refused(
        &gen_crawlers(&refused),
        1,
        &["list googlebot: refused", "more than the 50% allowed"],
    );
    refused.push("--force");
    let record: PolicyList =
        serde_json::from_str(&process::success_stdout(&gen_crawlers(&refused))).unwrap();
    assert_eq!((record.counts.ipv4, record.counts.ipv6), (1, 1));
}
