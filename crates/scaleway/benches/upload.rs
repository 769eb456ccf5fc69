//! Upload throughput of the image upload (SigV4, multipart) against the S3 stand-in on loopback,
//! beside `curl --aws-sigv4 --upload-file` to the same stand-in, in one run:
//! `cargo bench -p scaleway --bench upload`. Both are bounded by the stand-in (Python), which
//! checks every signature and hashes every body: the figures compare the two clients, not S3.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::process::Command;
use std::time::{Duration, Instant};

use pop_common::wait::ThreadSleeper;
use scaleway::s3::S3;
use scaleway::{RetryPolicy, SecretKey, UreqTransport};

const ACCESS: &str = "SCWBENCHBENCHBENCHBE";
const SECRET: &str = "bench-secret-not-a-real-one";
const MIB: usize = 1024 * 1024;

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let stand_in = testkit::standin::s3(dir.path(), ACCESS, SECRET);
    let endpoint = stand_in.url();
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this too, as a quick smoke
    // run (one multipart upload of 11 MiB) that still goes through every step.
    let bench = std::env::args().any(|a| a == "--bench");
    let size = if bench { 256 * MIB } else { 11 * MIB };
    let file = dir.path().join("image.qcow2");
    let bytes = testkit::incompressible_bytes(size, 0x2545_f491_4f6c_dd1d);
    std::fs::write(&file, &bytes).unwrap();
    drop(bytes);

    let transport = UreqTransport::new(Duration::from_secs(600));
    let s3 = S3::new(
        &transport,
        &ThreadSleeper,
        &endpoint,
        "fr-par",
        ACCESS,
        SecretKey::new(SECRET),
        RetryPolicy::default(),
    );
    s3.create_bucket("bench").unwrap();
    let mb = size as f64 / 1e6;
    let part_sizes: &[usize] = if bench { &[16, 64] } else { &[5] };
    for &part in part_sizes {
        let start = Instant::now();
        s3.upload_file("bench", &format!("scaleway-{part}"), &file, part * MIB, &[])
            .unwrap();
        let secs = start.elapsed().as_secs_f64();
        let stored = s3
            .object_size("bench", &format!("scaleway-{part}"))
            .unwrap();
        assert_eq!(stored, Some(size as u64), "the whole file arrived");
        println!(
            "scaleway S3 upload ({part} MiB parts): {mb:.0} MB in {secs:.2} s = {:.0} MB/s",
            mb / secs
        );
    }
    let start = Instant::now();
    let status = Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--aws-sigv4",
            "aws:amz:fr-par:s3",
        ])
        .args(["--user", &format!("{ACCESS}:{SECRET}")])
        .args(["-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"])
        .arg("--upload-file")
        .arg(&file)
        .arg(format!("{endpoint}/bench/curl"))
        .output();
    let secs = start.elapsed().as_secs_f64();
    let stored = s3.object_size("bench", "curl").unwrap();
    assert_eq!(stored, Some(size as u64), "curl's whole file arrived");
    match status {
        Ok(out) => println!(
            "curl --upload-file (one PUT, HTTP {}): {mb:.0} MB in {secs:.2} s = {:.0} MB/s",
            String::from_utf8_lossy(&out.stdout),
            mb / secs
        ),
        Err(e) => println!("curl: {e}"),
    }
}
