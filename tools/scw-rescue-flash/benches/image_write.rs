//! `make bench`: the image write's throughput over loopback SSH, against the baseline
//! `ssh host 'dd of=FILE bs=4M' < image` (OpenSSH's own client) in the same run, on the same
//! sshd. Both write into `dd of=FILE bs=4M` on the far side; ours reads the .zst and
//! decompresses as it streams, the baseline reads the raw image. Goal: at least 90 % of the
//! baseline. Figures are the median of 5 alternating rounds, in MB/s of raw image. On a machine
//! with two cores, the client, sshd, dd and the decompression share them: the figure says how
//! much of the transport's cost is ours, not what a 1 Gbit/s Elastic Metal link will carry.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

#[path = "../tests/support/sshd.rs"]
mod sshd;

use std::fs::{self, File};
use std::io::BufReader;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use scw_rescue_flash::progress::Progress;
use scw_rescue_flash::read_ahead::ReadAhead;
use scw_rescue_flash::rescue::Rescue;

const RAW_MIB: usize = 512;
const ROUNDS: usize = 5;

fn main() {
    // `cargo test --all-targets` runs benches once as tests, without `--bench`: nothing to
    // measure then (the tests cover the behaviour); `cargo bench` passes `--bench`.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let Some((rescue, sshd)) = sshd::rescue("bench image_write") else {
        return;
    };
    // An image like a disk's: random blocks (incompressible) between runs of zeros.
    let mut raw = vec![0u8; RAW_MIB << 20];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for (i, block) in raw.chunks_mut(1 << 20).enumerate() {
        if i % 2 == 0 {
            for byte in block.iter_mut() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *byte = state as u8;
            }
        }
    }
    let raw_path = rescue.path("image.raw");
    let zst_path = rescue.path("image.raw.zst");
    fs::write(&raw_path, &raw).unwrap();
    fs::write(&zst_path, zstd::encode_all(raw.as_slice(), 3).unwrap()).unwrap();
    drop(raw);
    let target = rescue.path("disk.img");
    let command = format!("dd of={} bs=4M status=none", target.display());
    let address: SocketAddr = ([127, 0, 0, 1], sshd.port).into();
    let bytes = (RAW_MIB << 20) as f64;

    // `raw`: the transport alone (the raw image, no decompression), to tell the two costs apart.
    let ours = |raw: bool| {
        let started = Instant::now();
        let session = Rescue::connect(
            address,
            &rescue.user,
            &rescue.path("user_key"),
            Duration::from_secs(60),
        )
        .unwrap();
        let reader = if raw {
            ReadAhead::new(File::open(&raw_path).unwrap())
        } else {
            ReadAhead::new(
                zstd::stream::read::Decoder::with_buffer(BufReader::with_capacity(
                    1 << 20,
                    File::open(&zst_path).unwrap(),
                ))
                .unwrap(),
            )
        };
        let mut progress = Progress::new("bench", bytes as u64);
        let sent = session.stream(&command, reader, &mut progress).unwrap();
        assert_eq!(sent as f64, bytes);
        started.elapsed()
    };
    let baseline = || {
        let started = Instant::now();
        let status = Command::new("ssh")
            .args([
                "-T",
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=no",
            ])
            .args([
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "LogLevel=ERROR",
                "-i",
            ])
            .arg(rescue.path("user_key"))
            .args(["-p", &sshd.port.to_string()])
            .arg(format!("{}@127.0.0.1", rescue.user))
            .arg(&command)
            .stdin(File::open(&raw_path).unwrap())
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        started.elapsed()
    };
    let mut ours_times = Vec::new();
    let mut raw_times = Vec::new();
    let mut base_times = Vec::new();
    for _ in 0..ROUNDS {
        base_times.push(baseline());
        assert_eq!(fs::metadata(&target).unwrap().len() as f64, bytes);
        ours_times.push(ours(false));
        assert_eq!(fs::metadata(&target).unwrap().len() as f64, bytes);
        raw_times.push(ours(true));
        assert_eq!(fs::metadata(&target).unwrap().len() as f64, bytes);
    }
    let median = |times: &mut Vec<Duration>| {
        times.sort();
        bytes / 1e6 / times[times.len() / 2].as_secs_f64()
    };
    let (ours, base) = (median(&mut ours_times), median(&mut base_times));
    let transport = median(&mut raw_times);
    let ratio = ours / base * 100.0;
    println!("image write over loopback SSH, {RAW_MIB} MiB raw, median of {ROUNDS}:");
    println!("  ssh host 'dd of=FILE bs=4M' < image   {base:7.0} MB/s");
    println!(
        "  scw-rescue-flash (zstd, libssh2)       {ours:7.0} MB/s  ({ratio:.0} % of the baseline; goal >= 90 %)"
    );
    println!(
        "  the same from the raw image            {transport:7.0} MB/s  ({:.0} %: the transport alone)",
        transport / base * 100.0
    );
}
