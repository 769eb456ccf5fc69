//! lists-gen-asn over the real captures in ../shared/fixtures, read from files and served over
//! loopback HTTP, checked against Python's ipaddress (tests/oracle.py) as an independent oracle;
//! and every way a source can fail: nothing on stdout, a non-zero exit naming the source.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lists_core::records::PolicyList;
use testkit::http::{Reply, Server};
use testkit::{process, workspace};

const HOSTING: &str = "16276,24940,14061,12876,16509,396982,8075,63949,20473,13335";
const BIN: &str = env!("CARGO_BIN_EXE_lists-gen-asn");

fn fixture(shared: &Path, rel: &str) -> PathBuf {
    shared.join("fixtures/asn").join(rel)
}

fn gen_asn(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("EDGEPOP_LOG")
        .output()
        .unwrap()
}

fn oracle(format: &str, asns: &str, files: &[&Path]) -> String {
    let mut args = vec![format.as_ref(), asns.as_ref()];
    args.extend(files.iter().map(|f| f.as_os_str()));
    workspace::python_oracle::<&std::ffi::OsStr>(env!("CARGO_MANIFEST_DIR"), &args)
}

/// Runs the generator on `file` from disk (text output) and over HTTP (JSON record), and
/// checks both against Python.
fn equals_python(test: &str, rel: &str, format: &str, asns: &str) {
    let Some(shared) = workspace::shared_dir(test) else {
        return;
    };
    if !workspace::python3(test) {
        return;
    }
    let file = fixture(&shared, rel);
    let expected = oracle(format, asns, &[&file]);
    assert!(!expected.is_empty(), "{rel}: the oracle selected nothing");
    let asn_args: Vec<String> = asns.split(',').map(|a| format!("--asn={a}")).collect();

    let mut args: Vec<&str> = asn_args.iter().map(String::as_str).collect();
    args.extend(["-o", "text", file.to_str().unwrap()]);
    assert_eq!(
        process::success_stdout(&gen_asn(&args)),
        expected,
        "{rel} from a file"
    );

    let server = Server::start(vec![Reply::ok(std::fs::read(&file).unwrap())]).unwrap();
    let url = format!("{}/data/{}", server.url, rel);
    let mut args: Vec<&str> = asn_args.iter().map(String::as_str).collect();
    args.extend(["--list-name", "hosting", &url]);
    let record: PolicyList =
        serde_json::from_str(&process::success_stdout(&gen_asn(&args))).unwrap();
    assert!(record.problems().is_empty(), "{:?}", record.problems());
    assert_eq!(
        lists_core::list::to_text(&record),
        expected,
        "{rel} over HTTP"
    );
    assert_eq!(record.sources, vec![url]);
    assert_eq!(record.asns.len(), asns.split(',').count());
    assert_eq!(server.requests()[0].method, "GET");
}

#[test]
fn the_full_ip_location_db_ipv4_dataset_gives_what_python_gives() {
    equals_python(
        "the_full_ip_location_db_ipv4_dataset_gives_what_python_gives",
        "ip-location-db/asn-ipv4_2026-06-17.csv.gz",
        "ip-location-db",
        HOSTING,
    );
}

#[test]
fn the_ip_location_db_ipv6_dataset_gives_what_python_gives() {
    equals_python(
        "the_ip_location_db_ipv6_dataset_gives_what_python_gives",
        "ip-location-db/asn-ipv6_2026-06-17.csv.gz",
        "ip-location-db",
        HOSTING,
    );
}

#[test]
fn the_iptoasn_v6_dataset_gives_what_python_gives() {
    equals_python(
        "the_iptoasn_v6_dataset_gives_what_python_gives",
        "iptoasn/ip2asn-v6_2024-11-07.tsv.gz",
        "iptoasn",
        HOSTING,
    );
}

#[test]
fn the_iptoasn_v4_slice_gives_what_python_gives() {
    equals_python(
        "the_iptoasn_v4_slice_gives_what_python_gives",
        "iptoasn/ip2asn-v4_slice-google-cloudflare_2019-02-19.tsv",
        "iptoasn",
        "15169,13335,36040",
    );
}

#[test]
fn the_geolite2_asn_blocks_give_what_python_gives() {
    equals_python(
        "the_geolite2_asn_blocks_give_what_python_gives",
        "geolite2/GeoLite2-ASN-Blocks-IPv6_2019-01-29.csv",
        "geolite2",
        HOSTING,
    );
}

#[test]
fn several_sources_of_both_families_make_one_list() {
    let test = "several_sources_of_both_families_make_one_list";
    let Some(shared) = workspace::shared_dir(test) else {
        return;
    };
    if !workspace::python3(test) {
        return;
    }
    let v4 = fixture(
        &shared,
        "iptoasn/ip2asn-v4_slice-google-cloudflare_2019-02-19.tsv",
    );
    let v6 = fixture(&shared, "iptoasn/ip2asn-v6_2024-11-07.tsv.gz");
    let expected = oracle("iptoasn", "13335,15169", &[&v4, &v6]);
    let out = gen_asn(&[
        "--asn=AS13335,AS15169",
        "--format=iptoasn",
        v4.to_str().unwrap(),
        v6.to_str().unwrap(),
    ]);
    let record: PolicyList = serde_json::from_str(&process::success_stdout(&out)).unwrap();
    assert!(record.counts.ipv4 > 0 && record.counts.ipv6 > 0);
    assert_eq!(lists_core::list::to_text(&record), expected);
}

#[test]
fn a_source_that_is_down_is_refused_naming_it() {
    let url = format!(
        "{}/ip2asn.tsv.gz",
        testkit::http::closed_port_url().unwrap()
    );
    let out = gen_asn(&["--asn=13335", &url]);
    process::assert_refused(&out, 1, &[&format!("source {url}: unreachable")]);
}

#[test]
fn a_source_that_stalls_is_a_timeout() {
    let server = Server::start(vec![Reply::Stall]).unwrap();
    let url = format!("{}/ip2asn.tsv.gz", server.url);
    let out = gen_asn(&["--asn=13335", "--timeout=1", &url]);
    process::assert_refused(&out, 1, &[&format!("source {url}: timed out after 1 s")]);
}

#[test]
fn an_http_error_is_refused_with_its_status() {
    let server = Server::start(vec![Reply::status(500)]).unwrap();
    let url = format!("{}/ip2asn.tsv.gz", server.url);
    let out = gen_asn(&["--asn=13335", &url]);
    process::assert_refused(&out, 1, &[&format!("source {url}: HTTP status 500")]);
}

#[test]
fn a_truncated_gzip_is_refused_from_a_file_and_over_http() {
    let test = "a_truncated_gzip_is_refused_from_a_file_and_over_http";
    let Some(shared) = workspace::shared_dir(test) else {
        return;
    };
    let full = std::fs::read(fixture(&shared, "iptoasn/ip2asn-v6_2024-11-07.tsv.gz")).unwrap();
    let cut = full[..full.len() * 2 / 3].to_vec();
    let (_dir, file) = testkit::temp_file("ip2asn-v6.tsv.gz", &cut);
    let out = gen_asn(&["--asn=13335", file.to_str().unwrap()]);
    process::assert_refused(&out, 1, &["ip2asn-v6.tsv.gz: ends early"]);

    // Served whole but cut by the server (fewer bytes than its Content-Length).
    let server = Server::start(vec![Reply::Cut {
        declared: full.len(),
        body: cut,
    }])
    .unwrap();
    let url = format!("{}/ip2asn-v6.tsv.gz", server.url);
    let out = gen_asn(&["--asn=13335", &url]);
    process::assert_refused(&out, 1, &[&format!("source {url}: ends early")]);
}

#[test]
fn garbage_and_a_format_that_does_not_match_are_refused() {
    // A remote source that served HTML failed (exit 1, like a source that is down); a local file
    // in the wrong format is bad input (exit 2).
    let server = Server::start(vec![Reply::ok(
        "<!DOCTYPE html>\n<html><body>Rate limited</body></html>\n",
    )])
    .unwrap();
    let url = format!("{}/ip2asn.tsv", server.url);
    let out = gen_asn(&["--asn=13335", &url]);
    process::assert_refused(
        &out,
        1,
        &[&format!("source {url}: not an IP-to-ASN dataset"), "line 1"],
    );

    let (_dir, csv) =
        testkit::temp_file("asn.csv", "1.0.0.0,1.0.0.255,13335,\"Cloudflare, Inc.\"\n");
    let out = gen_asn(&["--asn=13335", "--format=geolite2", csv.to_str().unwrap()]);
    process::assert_refused(
        &out,
        2,
        &["does not match the GeoLite2-ASN CSV format: line 1"],
    );
}

#[test]
fn bad_rows_are_tolerated_up_to_the_limit_and_reported_with_line_numbers() {
    let (_dir, csv) = testkit::temp_file(
        "asn.csv",
        "1.0.0.0,1.0.0.255,13335,Cloudflare\n1.0.1.0,banana,13335,x\n1.0.2.0,1.0.2.255,13335,y\n1.0.3.0,1.0.3.255\n",
    );
    let path = csv.to_str().unwrap();
    let out = gen_asn(&["--asn=13335", "--max-bad-rows=2", "-o", "text", path]);
    assert_eq!(process::success_stdout(&out), "1.0.0.0/24\n1.0.2.0/24\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("skipped 2 row(s)"), "{stderr}");
    let out = gen_asn(&["--asn=13335", "--max-bad-rows=1", path]);
    process::assert_refused(
        &out,
        2,
        &[
            "2 rows fail to parse (at most 1 tolerated)",
            "line 2: last address invalid",
            "line 4: too few fields",
        ],
    );
}

#[test]
fn an_empty_result_is_refused() {
    let (_dir, csv) = testkit::temp_file("asn.csv", "1.0.0.0,1.0.0.255,13335,Cloudflare\n");
    let out = gen_asn(&["--asn=64496", csv.to_str().unwrap()]);
    process::assert_refused(&out, 1, &["list hosting: empty result"]);
    std::fs::write(&csv, "").unwrap();
    let out = gen_asn(&["--asn=64496", csv.to_str().unwrap()]);
    process::assert_refused(&out, 2, &["holds no data row"]);
}

#[test]
fn a_large_shrink_is_refused_unless_forced() {
    let test = "a_large_shrink_is_refused_unless_forced";
    let Some(shared) = workspace::shared_dir(test) else {
        return;
    };
    let file = fixture(
        &shared,
        "iptoasn/ip2asn-v4_slice-google-cloudflare_2019-02-19.tsv",
    );
    let file = file.to_str().unwrap();
    let (dir, previous) = testkit::temp_file(
        "hosting.json",
        process::success_stdout(&gen_asn(&["--asn=13335,15169", file])),
    );
    let previous = format!("--previous={}", previous.display());

    // The same list again passes; Cloudflare alone is most of Google's prefixes lost.
    process::success_stdout(&gen_asn(&["--asn=13335,15169", &previous, file]));
    let out = gen_asn(&["--asn=13335", &previous, file]);
    process::assert_refused(
        &out,
        1,
        &["list hosting: refused", "more than the 50% allowed"],
    );
    let forced = gen_asn(&["--asn=13335", &previous, "--force", file]);
    assert!(!process::success_stdout(&forced).is_empty());
    // The previous list may also be the text form of a ConfigMap key.
    let text = dir.path().join("hosting.txt");
    std::fs::write(
        &text,
        process::success_stdout(&gen_asn(&["--asn=13335,15169", "-o", "text", file])),
    )
    .unwrap();
    let out = gen_asn(&[
        "--asn=13335",
        &format!("--previous={}", text.display()),
        file,
    ]);
    process::assert_refused(&out, 1, &["refused"]);
}
