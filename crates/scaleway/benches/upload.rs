//! Throughput of the image upload (SigV4, multipart, parts sent concurrently) against the S3
//! stand-in on loopback, beside rclone (Debian's, as users run it: its own S3 multipart upload
//! with the same part size and the same parts at once) on the same stand-in, in one run:
//! `cargo bench -p scaleway --bench upload`. Each figure is the median of a few rounds, the
//! clients taking turns, so that the load of the machine falls on both alike. Both are bounded by
//! the stand-in (Python), which checks every signature and hashes every body on the same two
//! cores: the figures compare the clients, not Object Storage.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use pop_common::wait::ThreadSleeper;
use scaleway::s3::S3;
use scaleway::s3::multipart::{MAX_PARALLEL, Multipart};
use scaleway::{RetryPolicy, SecretKey, UreqTransport};

const ACCESS: &str = "SCWBENCHBENCHBENCHBE";
const SECRET: &str = "bench-secret-not-a-real-one";
const MIB: usize = 1024 * 1024;
/// Parts in flight, for both clients: the tool's default, and rclone's.
const PARALLEL: usize = 4;
/// The goal: at least this share of rclone's throughput.
const GOAL: f64 = 0.9;

fn main() {
    // The progress lines of every upload would bury the figures.
    pop_common::log::init("upload-bench", Some("warn"));
    let dir = tempfile::tempdir().unwrap();
    let stand_in = testkit::standin::s3(dir.path(), ACCESS, SECRET);
    let endpoint = stand_in.url();
    // `cargo bench` passes --bench; `cargo test --all-targets` runs this too, as a quick smoke
    // run (one multipart upload of 11 MiB by each client) that still goes through every step.
    let bench = std::env::args().any(|a| a == "--bench");
    let (size, part_sizes, rounds) = if bench {
        (256 * MIB, &[16, 64][..], 3)
    } else {
        (11 * MIB, &[5][..], 1)
    };
    let file = dir.path().join("image.qcow2");
    let bytes = testkit::incompressible_bytes(size, 0x2545_f491_4f6c_dd1d);
    std::fs::write(&file, &bytes).unwrap();

    // The transport scw-infra uploads with.
    let transport = UreqTransport::for_uploads(Duration::from_secs(120), MAX_PARALLEL);
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
    let rclone = testkit::process::which("rclone").is_some();
    if !rclone {
        assert!(
            !bench,
            "rclone is missing (pipelines/setup.sh bench installs Debian's)"
        );
        println!("rclone is missing: the smoke run uploads with edgepop only");
    }
    let mb = mb_of(size);
    println!(
        "image upload to the S3 stand-in: {mb:.0} MB, median MB/s of {rounds} round(s), the \
         clients taking turns"
    );
    let run = Run {
        s3: &s3,
        endpoint: &endpoint,
        file: &file,
        dir: dir.path(),
        bytes: &bytes,
        rounds,
        rclone,
    };
    let mut verdicts = Vec::new();
    for &part in part_sizes {
        let [ours, one_at_a_time, theirs, unsummed] = run.speeds(part);
        println!("  {part} MiB parts, {PARALLEL} at once: edgepop {ours:6.0} MB/s");
        if rclone {
            println!("  {part} MiB parts, {PARALLEL} at once: rclone  {theirs:6.0} MB/s");
            println!(
                "  {part} MiB parts, {PARALLEL} at once: rclone  {unsummed:6.0} MB/s with \
                 --s3-disable-checksum (no whole-file MD5 first)"
            );
            // Against the faster of the two: rclone at its best here.
            let best = theirs.max(unsummed);
            let ratio = ours / best;
            let met = if ratio >= GOAL { "met" } else { "NOT met" };
            verdicts.push(format!(
                "  {part} MiB parts: edgepop / rclone (its faster run) = {ratio:.2} (goal >= \
                 {GOAL:.2}): {met}"
            ));
        }
        println!(
            "  {part} MiB parts, 1 at a time: edgepop {one_at_a_time:6.0} MB/s (for reference)"
        );
    }
    for verdict in verdicts {
        println!("{verdict}");
    }
    drop(stand_in);
}

/// Megabytes (10^6 bytes).
fn mb_of(bytes: usize) -> f64 {
    bytes as f64 / 1e6
}

/// What every round uploads, where, and with what.
struct Run<'a> {
    s3: &'a S3<'a>,
    endpoint: &'a str,
    file: &'a Path,
    /// The stand-in's folder, where it stores the objects.
    dir: &'a Path,
    /// The file's bytes, which every stored object must be.
    bytes: &'a [u8],
    rounds: usize,
    rclone: bool,
}

impl Run<'_> {
    /// The median MB/s of the rounds with parts of `part` MiB: edgepop with PARALLEL parts at
    /// once, edgepop one at a time, rclone, rclone without its whole-file MD5 (0 without
    /// rclone); the clients take turns within each round.
    fn speeds(&self, part: usize) -> [f64; 4] {
        let mb = mb_of(self.bytes.len());
        let mut speeds: [Vec<f64>; 4] = Default::default();
        for _ in 0..self.rounds {
            for (parallel, i) in [(PARALLEL, 0), (1, 1)] {
                let key = format!("edgepop-{part}-{parallel}");
                let start = Instant::now();
                let how = Multipart {
                    part_size: part * MIB,
                    parallel,
                };
                self.s3
                    .upload_file("bench", &key, self.file, how, &[])
                    .unwrap();
                speeds[i].push(mb / start.elapsed().as_secs_f64());
                self.stored(&key);
            }
            if self.rclone {
                for (checksum, i) in [(true, 2), (false, 3)] {
                    let key = format!("rclone-{part}-{checksum}");
                    let start = Instant::now();
                    rclone_upload(self.endpoint, self.file, &key, part, checksum);
                    speeds[i].push(mb / start.elapsed().as_secs_f64());
                    self.stored(&key);
                }
            }
        }
        speeds.map(|mut s| if s.is_empty() { 0.0 } else { median(&mut s) })
    }

    /// Checks that the object `key` is the file, then removes it.
    fn stored(&self, key: &str) {
        let path = self.dir.join("s3/bench").join(key);
        assert!(
            std::fs::read(&path).unwrap() == self.bytes,
            "{key}: the object is not the file"
        );
        std::fs::remove_file(path).unwrap();
    }
}

/// `rclone copyto FILE s3:bench/KEY` as a user runs it against Object Storage, with the part size
/// and the parts at once of the edgepop upload; the remote is described by environment variables,
/// the secret included (never in argv). By default rclone reads the whole file for its MD5 (kept
/// in the object's metadata) before sending it; `checksum: false` skips that.
fn rclone_upload(endpoint: &str, file: &Path, key: &str, part_mib: usize, checksum: bool) {
    let mut command = Command::new("rclone");
    if !checksum {
        command.arg("--s3-disable-checksum");
    }
    command
        .env("RCLONE_CONFIG_BENCH_TYPE", "s3")
        // rclone's "Scaleway" provider insists on bucket.host URLs, which a loopback address
        // cannot have: the generic S3 one, with path-style URLs.
        .env("RCLONE_CONFIG_BENCH_PROVIDER", "Other")
        .env("RCLONE_CONFIG_BENCH_ENDPOINT", endpoint)
        .env("RCLONE_CONFIG_BENCH_REGION", "fr-par")
        .env("RCLONE_CONFIG_BENCH_ACCESS_KEY_ID", ACCESS)
        .env("RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY", SECRET)
        // A loopback endpoint has no bucket name in its host.
        .env("RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE", "true")
        // The endpoint is plain http: a CA bundle set for the machine's other tools is of no use,
        // and the AWS SDK in rclone refuses to start with one and rclone's own transport.
        .env_remove("AWS_CA_BUNDLE")
        // No retries: a failure fails the bench at once (a run without failures is unchanged).
        .args([
            "--config",
            "/dev/null",
            "-q",
            "--retries=1",
            "--low-level-retries=1",
        ])
        .arg("copyto")
        .arg(file)
        .arg(format!("bench:bench/{key}"))
        .arg(format!("--s3-chunk-size={part_mib}Mi"))
        .arg(format!("--s3-upload-cutoff={part_mib}Mi"))
        .arg(format!("--s3-upload-concurrency={PARALLEL}"));
    testkit::process::stdout_of(&mut command);
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
