//! The upload of a file to Object Storage through the real transport, against the S3 stand-in
//! (every signature checked, multipart as S3 does it, requests served concurrently): parts in
//! flight at once and answered out of order, a part retried alone, a part that fails for good
//! aborting the upload, an upload an interrupted run left unfinished, and the object and its ETag
//! as S3 makes them (the ETag from an independent oracle, Python's hashlib). And the listing of a
//! bucket, page after page, as S3 pages it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pop_common::wait::Sleeper;
use scaleway::s3::multipart::{MAX_PARALLEL, Multipart};
use scaleway::s3::{S3, S3Error};
use scaleway::{RetryPolicy, SecretKey, UreqTransport};
use serde_json::{Value, json};

const ACCESS: &str = "SCWTESTTESTTESTTESTT";
const SECRET: &str = "test-secret-not-a-real-one";
const MIB: usize = 1024 * 1024;
const BUCKET: &str = "images";
const KEY: &str = "talos/v1.14.0.qcow2";
/// Three tries in all for each request: a part answered 500 three times has failed for good.
const ATTEMPTS: u32 = 3;

/// Retries at once: the tests count requests, never time.
#[derive(Debug)]
struct NoSleep;
impl Sleeper for NoSleep {
    fn sleep(&self, _: Duration) {}
}

struct Setup {
    // Killed on drop, before `dir` is removed (fields drop in order).
    stand_in: testkit::standin::StandIn,
    transport: UreqTransport,
    dir: tempfile::TempDir,
}

impl Setup {
    /// The stand-in with an empty bucket; `None` (after skip_or_fail) without python3.
    fn start(test: &str) -> Option<Setup> {
        if !testkit::workspace::python3(test) {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let setup = Setup {
            stand_in: testkit::standin::s3(dir.path(), ACCESS, SECRET),
            transport: UreqTransport::for_uploads(Duration::from_secs(60), MAX_PARALLEL),
            dir,
        };
        setup.s3().create_bucket(BUCKET).unwrap();
        setup.take_log();
        Some(setup)
    }

    fn s3(&self) -> S3<'_> {
        S3::new(
            &self.transport,
            &NoSleep,
            &self.stand_in.url(),
            "fr-par",
            ACCESS,
            SecretKey::new(SECRET),
            RetryPolicy {
                attempts: ATTEMPTS,
                base: Duration::ZERO,
                cap: Duration::ZERO,
            },
        )
    }

    /// A file of `len` bytes that do not repeat.
    fn file(&self, len: usize) -> PathBuf {
        let path = self.dir.path().join("image.qcow2");
        std::fs::write(
            &path,
            testkit::incompressible_bytes(len, 0x5851_f42d_4c95_7f2d),
        )
        .unwrap();
        path
    }

    /// Uploads `file` in parts of 5 MiB, `parallel` at once.
    fn upload(&self, file: &Path, parallel: usize) -> Result<u64, S3Error> {
        let how = Multipart {
            part_size: 5 * MIB,
            parallel,
        };
        self.s3().upload_file(BUCKET, KEY, file, how, &[])
    }

    /// No multipart upload of the key is left begun, neither completed nor aborted.
    fn assert_none_unfinished(&self) {
        let left = self.s3().unfinished_uploads(BUCKET, KEY).unwrap();
        assert_eq!(left, Vec::<String>::new());
    }

    fn faults(&self, faults: Value) {
        testkit::scaleway::control(&self.stand_in.url(), "faults", Some(&faults));
    }

    /// The requests the stand-in answered so far, in the order it answered them (and forgets
    /// them); none of them refused for its signature.
    fn take_log(&self) -> Vec<Value> {
        testkit::scaleway::take_log(&self.dir.path().join("s3.jsonl"))
    }

    /// The object the stand-in stored is `file`.
    #[track_caller]
    fn assert_stored(&self, file: &Path) {
        assert!(self.stored().unwrap() == std::fs::read(file).unwrap());
    }

    /// The object as the stand-in stored it.
    fn stored(&self) -> Option<Vec<u8>> {
        std::fs::read(
            self.dir
                .path()
                .join("s3")
                .join(BUCKET)
                .join(KEY.replace('/', "%2F")),
        )
        .ok()
    }
}

/// The part number of a logged part upload.
fn part(r: &Value) -> Option<u64> {
    let query = r["query"].as_str()?;
    (r["method"] == "PUT")
        .then(|| {
            query
                .split('&')
                .find_map(|kv| kv.strip_prefix("partNumber="))
        })??
        .parse()
        .ok()
}

/// The part numbers of the logged part uploads, in the order they were answered.
fn parts(log: &[Value]) -> Vec<u64> {
    log.iter().filter_map(part).collect()
}

/// What [`others`] finds of one upload that completes: the look for an unfinished one, the
/// start, the completion.
const COMPLETED: [&str; 3] = ["GET prefix", "POST uploads", "POST uploadId"];

/// `METHOD query` of each request that is not a part upload.
fn others(log: &[Value]) -> Vec<String> {
    log.iter()
        .filter(|r| part(r).is_none())
        .map(|r| {
            let query = r["query"].as_str().unwrap();
            let query = query.split('=').next().unwrap_or("");
            format!("{} {query}", r["method"].as_str().unwrap())
        })
        .collect()
}

/// A fault on the upload of part `n`: `{"status": ...}` or `{"hold_until": ...}`.
fn on_part(n: u64, mut fault: Value) -> Value {
    fault["method"] = json!("PUT");
    fault["query"] = json!(format!("(^|&)partNumber={n}(&|$)"));
    fault
}

/// The ETag S3 gives a multipart object of `file` in parts of `part_size`, from Python's hashlib.
fn multipart_etag(file: &Path, part_size: usize) -> String {
    let out = Command::new("python3")
        .args([
            "-c",
            "import hashlib, sys\n\
             data = open(sys.argv[1], 'rb').read(); size = int(sys.argv[2])\n\
             parts = [data[i:i + size] for i in range(0, len(data), size)]\n\
             digest = hashlib.md5(b''.join(hashlib.md5(p).digest() for p in parts))\n\
             print(f'\"{digest.hexdigest()}-{len(parts)}\"')",
        ])
        .arg(file)
        .arg(part_size.to_string())
        .output()
        .unwrap();
    testkit::process::success_stdout(&out).trim().to_owned()
}

#[test]
fn parts_go_up_at_once_and_out_of_order_into_the_object_s3_makes() {
    let Some(s) = Setup::start("parts_out_of_order") else {
        return;
    };
    // 5 parts: four of 5 MiB and one of 1 MiB.
    let file = s.file(21 * MIB);
    // Part 1 is kept until part 3 has been answered: one part at a time would never get there.
    s.faults(json!([on_part(
        1,
        json!({"hold_until": "(^|&)partNumber=3(&|$)", "count": 1})
    )]));
    let parallel = 3;
    let size = s.upload(&file, parallel).unwrap();
    assert_eq!(size, 21 * MIB as u64);

    let log = s.take_log();
    let order = parts(&log);
    let position = |n| order.iter().position(|&p| p == n).unwrap();
    assert!(
        position(3) < position(1),
        "part 3 was stored before part 1: {order:?}"
    );
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [1, 2, 3, 4, 5], "each part sent once: {order:?}");
    assert_eq!(others(&log), COMPLETED);

    // The object is the file, and its ETag is S3's multipart ETag for 5 MiB parts.
    s.assert_stored(&file);
    let head = s.s3().object(BUCKET, KEY).unwrap().unwrap();
    assert_eq!(head.size, 21 * MIB as u64);
    let etag = head.etag.unwrap();
    assert!(etag.ends_with("-5\""), "{etag}");
    assert_eq!(etag, multipart_etag(&file, 5 * MIB));
    s.assert_none_unfinished();
}

#[test]
fn as_many_parts_as_asked_are_in_flight_at_once_and_no_more() {
    let Some(s) = Setup::start("parts_in_flight") else {
        return;
    };
    // 7 parts: six of 5 MiB and one of 1 MiB.
    let file = s.file(31 * MIB);
    // The first three parts to arrive are held until three are in flight at once.
    s.faults(json!([{"method": "PUT", "query": "(^|&)partNumber=", "gather": 3, "count": 3}]));
    let parallel = 3;
    s.upload(&file, parallel).unwrap();
    let log = s.take_log();
    let in_flight: Vec<u64> = log
        .iter()
        .filter(|r| part(r).is_some())
        .map(|r| r["in_flight"].as_u64().unwrap())
        .collect();
    assert_eq!(in_flight.len(), 7, "{log:?}");
    assert_eq!(in_flight.iter().max(), Some(&3), "{in_flight:?}");
    assert!(log.iter().all(|r| r["status"] == 200), "{log:?}");
    s.assert_stored(&file);
}

#[test]
fn a_part_that_fails_once_is_sent_again_alone() {
    let Some(s) = Setup::start("part_retried_alone") else {
        return;
    };
    let file = s.file(21 * MIB);
    s.faults(json!([on_part(2, json!({"status": 500, "count": 1}))]));
    let s3 = s.s3();
    let how = Multipart {
        part_size: 5 * MIB,
        parallel: 3,
    };
    s3.upload_file(BUCKET, KEY, &file, how, &[]).unwrap();

    let log = s.take_log();
    // Every request the stand-in answered is counted, the part sent again as a retry.
    let counts = s3.counts();
    assert_eq!(counts.retries, 1, "{counts:?}");
    assert_eq!(
        usize::try_from(counts.reads + counts.mutations).unwrap(),
        log.len(),
        "{counts:?}"
    );
    let mut sent = parts(&log);
    sent.sort_unstable();
    assert_eq!(sent, [1, 2, 2, 3, 4, 5], "part 2 twice, the others once");
    let failed: Vec<u64> = log
        .iter()
        .filter(|r| r["status"] != 200)
        .filter_map(part)
        .collect();
    assert_eq!(failed, [2]);
    // One upload, completed: nothing begun again, nothing aborted.
    assert_eq!(others(&log), COMPLETED);
    s.assert_stored(&file);
}

#[test]
fn a_part_that_keeps_failing_aborts_the_upload_and_names_the_part() {
    let Some(s) = Setup::start("part_fails_for_good") else {
        return;
    };
    let file = s.file(21 * MIB);
    s.faults(json!([on_part(3, json!({"status": 500, "count": 100}))]));
    let parallel = 2;
    let err = s.upload(&file, parallel).unwrap_err().to_string();
    assert!(
        err.starts_with("part 3 of 5 (bytes 10485760-15728639): ") && err.contains("HTTP 500"),
        "{err}"
    );

    let log = s.take_log();
    let sent = parts(&log);
    assert_eq!(
        sent.iter().filter(|&&n| n == 3).count(),
        ATTEMPTS as usize,
        "part 3 tried {ATTEMPTS} times: {sent:?}"
    );
    for n in [1, 2, 4, 5] {
        assert!(
            sent.iter().filter(|&&p| p == n).count() <= 1,
            "part {n} sent again: {sent:?}"
        );
    }
    // Aborted once the parts in flight had ended, never completed.
    assert_eq!(
        others(&log),
        ["GET prefix", "POST uploads", "DELETE uploadId"]
    );
    assert_eq!(log.last().unwrap()["method"], "DELETE");
    assert_eq!(s.stored(), None);
    s.assert_none_unfinished();
}

#[test]
fn a_completion_answered_200_with_an_error_is_an_error_and_the_upload_is_aborted() {
    let Some(s) = Setup::start("completion_200_error") else {
        return;
    };
    let file = s.file(11 * MIB);
    // S3 can answer a completion 200 and fail it, the error in the body.
    s.faults(json!([{"method": "POST", "query": "^uploadId=", "status": 200, "count": 1}]));
    let parallel = 2;
    let err = s.upload(&file, parallel).unwrap_err().to_string();
    assert!(err.contains("HTTP 200: SlowDown"), "{err}");
    let log = s.take_log();
    assert_eq!(
        others(&log),
        [
            "GET prefix",
            "POST uploads",
            "POST uploadId",
            "DELETE uploadId"
        ]
    );
    s.assert_none_unfinished();
}

#[test]
fn an_upload_an_interrupted_run_left_unfinished_is_aborted_first() {
    let Some(s) = Setup::start("unfinished_upload") else {
        return;
    };
    let file = s.file(11 * MIB);
    let parallel = 2;
    // A run whose part and abort both fail for good (every try) leaves its upload behind, as a
    // killed run does.
    s.faults(json!([
        on_part(2, json!({"status": 500, "count": ATTEMPTS})),
        {"method": "DELETE", "query": "^uploadId=", "status": 500, "count": ATTEMPTS},
    ]));
    s.upload(&file, parallel).unwrap_err();
    let left = s.s3().unfinished_uploads(BUCKET, KEY).unwrap();
    assert_eq!(left.len(), 1);
    s.take_log();

    s.upload(&file, parallel).unwrap();
    let log = s.take_log();
    assert_eq!(
        others(&log),
        [
            "GET prefix",
            "DELETE uploadId",
            "POST uploads",
            "POST uploadId"
        ]
    );
    assert!(log[1]["query"].as_str().unwrap().contains(&left[0]));
    s.assert_none_unfinished();
    s.assert_stored(&file);
}

#[test]
fn a_file_of_more_parts_than_object_storage_takes_is_refused_before_any_request() {
    let Some(s) = Setup::start("too_many_parts") else {
        return;
    };
    // 1001 parts of 5 MiB, as a sparse file: nothing is read before the count is checked.
    let path = s.dir.path().join("huge.qcow2");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(1001 * 5 * MIB as u64)
        .unwrap();
    let parallel = 4;
    let err = s.upload(&path, parallel).unwrap_err().to_string();
    assert!(
        err.contains("is 1001 parts, more than the 1000") && err.contains("huge.qcow2"),
        "{err}"
    );
    assert_eq!(s.take_log(), Vec::<Value>::new());
}

#[test]
fn a_listing_takes_every_page_s3_gives() {
    let Some(s) = Setup::start("a_listing_takes_every_page") else {
        return;
    };
    // Small objects, one PUT each; keys with characters the token and the XML must carry.
    let file = s.dir.path().join("small");
    std::fs::write(&file, b"x").unwrap();
    let keys = [
        "a",
        "b&c",
        "talos/v1.13.9.qcow2",
        "talos/v1.14.0.qcow2",
        "z z",
    ];
    for key in keys {
        let how = Multipart {
            part_size: 5 * MIB,
            parallel: 1,
        };
        s.s3().upload_file(BUCKET, key, &file, how, &[]).unwrap();
    }
    s.take_log();
    testkit::scaleway::control(
        &s.stand_in.url(),
        "listing",
        Some(&json!({ "page_size": 2 })),
    );
    assert_eq!(s.s3().list_keys(BUCKET, "").unwrap(), keys);
    let lists: Vec<Value> = s
        .take_log()
        .into_iter()
        .filter(|r| r["query"].as_str().unwrap().contains("list-type=2"))
        .collect();
    assert_eq!(lists.len(), 3, "{lists:?}");
    assert!(lists.iter().all(|r| r["status"] == 200), "{lists:?}");
    assert_eq!(
        s.s3().list_keys(BUCKET, "talos/").unwrap(),
        ["talos/v1.13.9.qcow2", "talos/v1.14.0.qcow2"]
    );
}

#[test]
fn a_clock_off_by_more_than_fifteen_minutes_is_named_in_the_error() {
    let Some(s) = Setup::start("a_clock_off_by_more_than_fifteen_minutes") else {
        return;
    };
    let clock = |offset_seconds: i64| {
        testkit::scaleway::control(
            &s.stand_in.url(),
            "clock",
            Some(&json!({ "offset_seconds": offset_seconds })),
        );
    };
    // Within S3's window, either way: answered.
    for offset in [-600, 600] {
        clock(offset);
        assert_eq!(s.s3().object(BUCKET, KEY).unwrap(), None);
    }
    clock(20 * 60);
    // A listing's answer names S3's reason; a HEAD's has no body, and its error says what a
    // bare 403 can mean.
    let err = s.s3().list_keys(BUCKET, "").unwrap_err().to_string();
    assert!(err.contains("HTTP 403: RequestTimeTooSkewed"), "{err}");
    let err = s.s3().object(BUCKET, KEY).unwrap_err().to_string();
    assert!(err.contains("HTTP 403 without a reason"), "{err}");
    assert!(err.contains("RequestTimeTooSkewed"), "{err}");
    // Behind, as far: refused alike.
    clock(-20 * 60);
    let err = s.s3().list_keys(BUCKET, "").unwrap_err().to_string();
    assert!(err.contains("RequestTimeTooSkewed"), "{err}");
}
