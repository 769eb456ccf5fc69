//! lists-gen-tor over the real captures in ../shared/fixtures, from files and over loopback
//! HTTP: the addresses equal the capture's unique addresses (Python as the oracle), Onionoo
//! yields IPv6 too; and the refusals: nothing on stdout, a non-zero exit naming the source.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lists_core::records::PolicyList;
use testkit::http::{Reply, Server};
use testkit::{process, workspace};

const BIN: &str = env!("CARGO_BIN_EXE_lists-gen-tor");

fn gen_tor(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("EDGEPOP_LOG")
        .output()
        .unwrap()
}

fn capture(test: &str, name: &str) -> Option<PathBuf> {
    workspace::fixture(test, &format!("tor/{name}"))
}

fn oracle(file: &Path) -> String {
    workspace::python_oracle(env!("CARGO_MANIFEST_DIR"), &[file])
}

/// From the file (text) and over HTTP (record): the unique addresses Python finds. Returns the
/// record.
fn equals_python(test: &str, name: &str) -> Option<PolicyList> {
    let file = capture(test, name)?;
    if !workspace::python3(test) {
        return None;
    }
    let expected = oracle(&file);
    assert_eq!(
        process::success_stdout(&gen_tor(&["-o", "text", file.to_str().unwrap()])),
        expected
    );
    let server = Server::start(vec![Reply::ok(std::fs::read(&file).unwrap())]).unwrap();
    let url = format!("{}/{name}", server.url);
    let record: PolicyList =
        serde_json::from_str(&process::success_stdout(&gen_tor(&[&url]))).unwrap();
    assert!(record.problems().is_empty(), "{:?}", record.problems());
    assert_eq!(lists_core::list::to_text(&record), expected);
    assert_eq!(
        record.counts.ipv4 + record.counts.ipv6,
        expected.lines().count()
    );
    Some(record)
}

#[test]
fn the_bulk_exit_list_gives_its_unique_addresses() {
    let test = "the_bulk_exit_list_gives_its_unique_addresses";
    if let Some(record) = equals_python(test, "torbulkexitlist_2023-10-14.txt") {
        assert_eq!((record.counts.ipv4, record.counts.ipv6), (1305, 0));
    }
}

#[test]
fn a_mixed_ipv4_and_ipv6_list_gives_both_families() {
    let test = "a_mixed_ipv4_and_ipv6_list_gives_both_families";
    if let Some(record) = equals_python(test, "secops-institute_tor-exit-nodes_2024-02-27.lst") {
        assert_eq!((record.counts.ipv4, record.counts.ipv6), (1127, 619));
    }
}

#[test]
fn the_tordnsel_exit_addresses_give_their_unique_addresses() {
    let test = "the_tordnsel_exit_addresses_give_their_unique_addresses";
    if let Some(record) = equals_python(test, "exit-addresses_2024-03-12.txt") {
        assert_eq!(record.counts.ipv4, 1174);
    }
}

#[test]
fn the_collector_variant_with_its_header_is_read_too() {
    let test = "the_collector_variant_with_its_header_is_read_too";
    if let Some(record) = equals_python(test, "collector-exit-list_2017-07-17-17-02-00.txt") {
        assert_eq!(record.counts.ipv4, 44);
    }
}

#[test]
fn onionoo_details_yield_the_exit_relays_ipv4_and_ipv6() {
    let test = "onionoo_details_yield_the_exit_relays_ipv4_and_ipv6";
    let name = "onionoo-details_full-fields_first-3-relays_2026-09-04.json";
    if let Some(record) = equals_python(test, name) {
        // Of three relays only Quintex152 has the Exit flag; the others' addresses stay out.
        assert_eq!(record.ipv4, vec!["204.8.96.141/32".parse().unwrap()]);
        assert_eq!(record.ipv6, vec!["2620:7:6003::141/128".parse().unwrap()]);
    }
}

#[test]
fn onionoo_details_without_flags_are_refused() {
    let test = "onionoo_details_without_flags_are_refused";
    let name = "onionoo-details_running-relays_fingerprint-or_addresses-country_2026-08-22.json";
    let Some(file) = capture(test, name) else {
        return;
    };
    let out = gen_tor(&[file.to_str().unwrap()]);
    process::assert_refused(&out, 2, &["Onionoo details without `flags`"]);
}

#[test]
fn several_sources_are_merged_without_duplicates() {
    let test = "several_sources_are_merged_without_duplicates";
    let (Some(bulk), Some(dnsel)) = (
        capture(test, "torbulkexitlist_2023-10-14.txt"),
        capture(test, "exit-addresses_2024-03-12.txt"),
    ) else {
        return;
    };
    let text = process::success_stdout(&gen_tor(&[
        "-o",
        "text",
        bulk.to_str().unwrap(),
        dnsel.to_str().unwrap(),
    ]));
    let mut lines: Vec<&str> = text.lines().collect();
    let n = lines.len();
    lines.dedup();
    assert_eq!(lines.len(), n);
    assert!((1305..=1305 + 1174).contains(&n), "{n}");
}

#[test]
fn sources_down_stalled_failing_or_cut_are_refused_naming_them() {
    let down = format!(
        "{}/torbulkexitlist",
        testkit::http::closed_port_url().unwrap()
    );
    process::assert_refused(
        &gen_tor(&[&down]),
        1,
        &[&format!("source {down}: unreachable")],
    );

    let server = Server::start(vec![Reply::Stall, Reply::status(503)]).unwrap();
    let url = format!("{}/torbulkexitlist", server.url);
    process::assert_refused(
        &gen_tor(&["--timeout=1", &url]),
        1,
        &["timed out after 1 s"],
    );
    process::assert_refused(
        &gen_tor(&[&url]),
        1,
        &[&format!("source {url}: HTTP status 503")],
    );

    let json =
        br#"{"version":"8.0","relays":[{"flags":["Exit"],"or_addresses":["204.8.96.141:444"]}]}"#;
    let server = Server::start(vec![Reply::Cut {
        declared: json.len(),
        body: json[..40].to_vec(),
    }])
    .unwrap();
    let url = format!("{}/details", server.url);
    process::assert_refused(
        &gen_tor(&[&url]),
        1,
        &[&format!("source {url}: ends early")],
    );
}

#[test]
fn garbage_is_refused() {
    let server =
        Server::start(vec![Reply::ok("<html><body>Service moved</body></html>\n")]).unwrap();
    let url = format!("{}/torbulkexitlist", server.url);
    // Served HTML: the remote source failed (exit 1); a bad local file below is bad input (2).
    process::assert_refused(
        &gen_tor(&[&url]),
        1,
        &[&format!("source {url}: not a Tor exit list")],
    );

    let (_dir, file) = testkit::temp_file(
        "exits.txt",
        "185.220.101.1\n10.0.0.1\n127.0.0.1\nnot-an-ip\n",
    );
    let out = gen_tor(&["--max-bad-rows=2", file.to_str().unwrap()]);
    process::assert_refused(
        &out,
        2,
        &[
            "3 rows fail to parse",
            "line 2: not a public address",
            "line 4: not an address",
        ],
    );
}

#[test]
fn a_large_shrink_is_refused_and_the_previous_list_names_the_reason() {
    let test = "a_large_shrink_is_refused_and_the_previous_list_names_the_reason";
    let Some(bulk) = capture(test, "torbulkexitlist_2023-10-14.txt") else {
        return;
    };
    let (dir, previous) = testkit::temp_file(
        "tor.txt",
        process::success_stdout(&gen_tor(&["-o", "text", bulk.to_str().unwrap()])),
    );
    let small = dir.path().join("small.txt");
    std::fs::write(&small, testkit::first_lines(&bulk, 100)).unwrap();
    let prev = format!("--previous={}", previous.display());
    let out = gen_tor(&[&prev, small.to_str().unwrap()]);
    process::assert_refused(
        &out,
        1,
        &["list tor: refused, IPv4 prefixes fell from 1305 to 100 (-92.3%)"],
    );
    assert!(
        process::success_stdout(&gen_tor(&[&prev, "--force", small.to_str().unwrap()]))
            .contains("\"tor\"")
    );
}
