//! `make bench`: the image write's throughput over loopback SSH, against the baseline
//! `ssh host 'dd of=FILE bs=4M' < image` (OpenSSH's own client, the raw image) in the same run,
//! on the same sshd, into the same `dd of=FILE bs=4M` on the far side. Goal: at least 90 % of
//! the baseline. Figures are the median of 5 alternating rounds, in MB/s of raw image.
//!
//! Two images: a disk-like one (half of its MiB blocks random, half zeros: a disk image is
//! mostly free space) and the worst case, an incompressible one. Each is written both ways the
//! tool can: the .zst as it is, for `zstd -dc` on the rescue side (the default when it saves at
//! least a tenth of the bytes), and decompressed here (the default otherwise, and the fallback
//! for a rescue system without zstd); then the raw image with no decompression anywhere (the
//! SSH transport alone).
//!
//! On a machine with two cores, the client, sshd, zstd and dd share them: the figure says how
//! much of the transport's cost is ours, not what a 1 Gbit/s Elastic Metal link will carry
//! (there, the bytes on the wire are what counts, and the .zst is what the default sends).
//! Since the other processes on the machine move the throughput figures by ±15 % from one run
//! to the next, the bench also gives the CPU time per MB of raw image, which the load does not
//! move: the client's (ours: this process, with its read-ahead thread; the baseline's: the
//! `ssh` child) and the far side's (sshd and what it ran: the shell, zstd, dd). Where the transport's gap is (perf, 2026-11): libssh2's own portable ChaCha20 and
//! Poly1305 (scalar C) take about 1.3 ms/MB, more than the whole OpenSSH client (about
//! 1.1 ms/MB, whose ChaCha20 is OpenSSL's vectorised one); its AES modes are dearer still (one
//! EVP call per 16-byte block). No session option changes that code path; sending fewer bytes
//! through it does.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use testkit::sshd;

use std::fs::{self, File};
use std::io::BufReader;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use scw_rescue_flash::login::Login;
use scw_rescue_flash::progress::Progress;
use scw_rescue_flash::read_ahead::ReadAhead;
use scw_rescue_flash::rescue::Rescue;
use scw_rescue_flash::{Image, write_image};
use sha2::{Digest, Sha256};

const RAW_MIB: usize = 512;

const ROUNDS: usize = 5;

/// A raw image of RAW_MIB MiB: every MiB block random when `incompressible`, else one in two.
fn raw_image(incompressible: bool) -> Vec<u8> {
    let mut raw = vec![0u8; RAW_MIB << 20];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for (i, block) in raw.chunks_mut(1 << 20).enumerate() {
        if incompressible || i % 2 == 0 {
            for byte in block.iter_mut() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *byte = state as u8;
            }
        }
    }
    raw
}

/// One write: its wall time, the client's CPU seconds, the far side's (sshd, shell, zstd, dd).
struct Run {
    time: Duration,
    client_cpu: f64,
    far_cpu: f64,
}

/// The medians of one mode's runs: MB/s of raw image, client and far-side CPU in ms per MB.
struct Medians {
    speed: f64,
    client: f64,
    far: f64,
}

fn medians(runs: &mut [Run]) -> Medians {
    let mb = (RAW_MIB << 20) as f64 / 1e6;
    let middle = runs.len() / 2;
    let mut pick = |key: fn(&Run) -> f64| {
        runs.sort_by(|a, b| key(a).total_cmp(&key(b)));
        key(&runs[middle])
    };
    Medians {
        speed: mb / pick(|r| r.time.as_secs_f64()),
        client: pick(|r| r.client_cpu) * 1e3 / mb,
        far: pick(|r| r.far_cpu) * 1e3 / mb,
    }
}

fn main() {
    // `cargo test --all-targets` runs benches once as tests, without `--bench`: nothing to
    // measure then (the tests cover the behaviour); `cargo bench` passes `--bench`.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let Some((rescue, sshd)) = sshd::rescue("bench image_write") else {
        return;
    };
    let images = images(&rescue);
    let target = rescue.path("disk.img");
    let write = format!("dd of={} bs=4M status=none", target.display());
    let address: SocketAddr = ([127, 0, 0, 1], sshd.port).into();
    let bytes = (RAW_MIB << 20) as u64;
    let connect = || {
        Rescue::connect(
            address,
            &rescue.user,
            &Login::KeyFile(rescue.path("user_key")),
            Duration::from_secs(60),
        )
        .unwrap()
    };
    // What landed: its size every time, its digest in the first round (hashing takes as long
    // as a write).
    let first_round = std::cell::Cell::new(true);
    let written = |image: &Image| {
        let disk = File::open(&target).unwrap();
        assert_eq!(disk.metadata().unwrap().len(), bytes);
        if !first_round.get() {
            return;
        }
        let mut hasher = Sha256::new();
        std::io::copy(&mut BufReader::new(disk), &mut hasher).unwrap();
        assert_eq!(pop_common::hex::encode(&hasher.finalize()), image.sha256);
    };

    // Times `write_image` and reads the CPU it cost on both sides. `child`: the client is a
    // child process (the baseline's `ssh`), not this one.
    let measure = |image: &Image, child: bool, write_image: &dyn Fn()| {
        let client = || {
            let (own, children) = sshd::cpu_seconds("self");
            if child { children } else { own }
        };
        let (client_before, far_before) = (client(), sshd.cpu_seconds());
        let started = Instant::now();
        write_image();
        let time = started.elapsed();
        // The daemon reaps the session a moment after the channel closes.
        std::thread::sleep(Duration::from_millis(300));
        let run = Run {
            time,
            client_cpu: client() - client_before,
            far_cpu: sshd.cpu_seconds() - far_before,
        };
        written(image);
        run
    };
    // The tool's own write (`send_image`), the .zst expanded on the far side or here.
    let ours = |image: &Image, on_rescue: bool| {
        measure(image, false, &|| {
            write_image(&connect(), image, "", b"", &write, on_rescue, "bench").unwrap();
        })
    };
    // The raw image through libssh2, no decompression anywhere.
    let transport = |raw_path: &Path, image: &Image| {
        measure(image, false, &|| {
            let reader = ReadAhead::new(File::open(raw_path).unwrap());
            let mut progress = Progress::new("bench (raw)", bytes);
            let sent = connect()
                .stream(&write, b"", reader, &mut progress)
                .unwrap();
            assert_eq!(sent, bytes);
        })
    };
    let baseline = |raw_path: &Path, image: &Image| {
        measure(image, true, &|| {
            ssh_baseline(&rescue, sshd.port, &write, raw_path);
        })
    };

    // Per image: baseline, on the rescue side, here, the transport alone.
    let mut runs: Vec<[Vec<Run>; 4]> = images.iter().map(|_| Default::default()).collect();
    for round in 0..ROUNDS {
        first_round.set(round == 0);
        for ((_, raw_path, image), runs) in images.iter().zip(&mut runs) {
            runs[0].push(baseline(raw_path, image));
            runs[1].push(ours(image, true));
            runs[2].push(ours(image, false));
            runs[3].push(transport(raw_path, image));
        }
    }
    report(&images, &mut runs);
}

/// The two images the bench writes, made in the rescue folder: a disk-like one (one MiB in two
/// random) and an incompressible one, each with its .zst and its measure.
fn images(rescue: &sshd::Rescue) -> Vec<(&'static str, PathBuf, Image)> {
    let mut images = Vec::new();
    for (name, incompressible) in [("disk-like", false), ("incompressible", true)] {
        let raw = raw_image(incompressible);
        let raw_path = rescue.path(&format!("{name}.raw"));
        let zst_path = rescue.path(&format!("{name}.raw.zst"));
        fs::write(&raw_path, &raw).unwrap();
        fs::write(&zst_path, zstd::encode_all(raw.as_slice(), 3).unwrap()).unwrap();
        drop(raw);
        images.push((name, raw_path, Image::measure(&zst_path).unwrap()));
    }
    images
}

/// `ssh host 'dd of=FILE bs=4M' < image`: the baseline, with OpenSSH.
fn ssh_baseline(rescue: &sshd::Rescue, port: u16, write: &str, raw_path: &Path) {
    let status = Command::new("ssh")
        .args([
            "-T",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
        ])
        .args(["-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"])
        .arg("-i")
        .arg(rescue.path("user_key"))
        .args(["-p", &port.to_string()])
        .arg(format!("{}@127.0.0.1", rescue.user))
        .arg(write)
        .stdin(File::open(raw_path).unwrap())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
}

/// The medians of each image's runs: baseline, on the rescue side, here, the transport alone.
fn report(images: &[(&str, PathBuf, Image)], runs: &mut [[Vec<Run>; 4]]) {
    let bytes = (RAW_MIB << 20) as u64;
    println!("image write over loopback SSH, {RAW_MIB} MiB raw, median of {ROUNDS} rounds:");
    println!(
        "(CPU: ms per MB of raw image, on the client and on the far side: sshd, shell, zstd, dd)"
    );
    for ((name, _, image), runs) in images.iter().zip(runs.iter_mut()) {
        let compressed = fs::metadata(&image.path).unwrap().len();
        let [base, rescue_side, here, alone] = runs.each_mut().map(|r| medians(r));
        println!(
            "{name} image (its .zst: {:.0} % of the raw bytes):",
            compressed as f64 * 100.0 / bytes as f64
        );
        let line = |what: &str, m: &Medians, note: &str| {
            println!(
                "  {what:<52} {:5.0} MB/s  CPU {:.2} + {:.2}  ({:3.0} % of the baseline{note})",
                m.speed,
                m.client,
                m.far,
                m.speed / base.speed * 100.0
            );
        };
        // The goal is for the tool's default (`--decompress-on auto`) with this image.
        let default = "; the default; goal >= 90 %";
        let (remote_note, local_note) = if image.worth_sending_compressed() {
            (default, "")
        } else {
            ("", default)
        };
        line("ssh host 'dd of=FILE bs=4M' < image", &base, "");
        line(
            "scw-rescue-flash: .zst expanded on the rescue side",
            &rescue_side,
            remote_note,
        );
        line("scw-rescue-flash: decompressed here", &here, local_note);
        line(
            "the raw image through libssh2 (transport alone)",
            &alone,
            "",
        );
    }
}
