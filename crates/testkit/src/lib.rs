//! What the workspace's tests share; a dev-dependency only, so no shipped library exports test
//! helpers.
//!
//! - [`cassettes`]: the Scaleway traffic recorded by Scaleway's own tools, for contract tests.
//! - [`cilium_chart`]: the ports the Cilium chart's host-network workloads open, read out of the
//!   merged values as its templates read them (helm cannot render the chart here).
//! - [`control_plane`]: a real Kubernetes control plane on loopback (etcd, kube-apiserver,
//!   kube-controller-manager, kube-scheduler, kwok for nodes and pods), one per test binary.
//! - [`crawler_ranges`]: the crawler operators' published ranges, captured, as list text.
//! - [`crds`]: the CRDs the platform layer installs, at their pins, for that control plane.
//! - [`http`]: a scripted HTTP/1.1 server on loopback that records every request.
//! - [`json`]: the element of a rendered list or record's array that has a given value.
//! - [`key_directory`]: a Web Bot Auth agent's key directory served as the agent serves it
//!   (signed), and requests signed as the agent signs them, with the RFC 9421 test key.
//! - [`openssl`]: certificates made with the openssl command (a new P-256 key and its request or
//!   self-signed certificate).
//! - [`oci_image`]: two tiny filter layouts and their `oci-image publish`, for the registry tests.
//! - [`istiod`]: istiod's answers to GatewayClasses and Gateways (istiod does not build here).
//! - [`process`]: checks of a tool's exit code, stdout and stderr.
//! - [`scaleway`]: the Scaleway stand-in's control endpoints and request log.
//! - [`sshd`]: a real OpenSSH server on loopback standing for Scaleway's rescue system.
//! - [`standin`]: the stand-ins of the APIs that cannot run here, in `stand-ins/` beside this crate
//!   (Python servers, and the recording `helm`, `kubectl` and `talosctl`); the servers are started
//!   on loopback and killed on drop.
//! - [`tunnel`]: an HTTP CONNECT proxy on loopback to one address (a cluster's API server under
//!   the name of its endpoint).
//! - [`upstream`]: the real upstream programs built at the pins (`pipelines/upstream.sh`).
//! - [`workspace`]: the workspace root, `../shared`, the binaries cargo built, `python3`.
//!
//! Tests that need something a user's machine may lack (chromium, sshd, the upstream schemas)
//! call [`skip_or_fail`] when it is missing: on a user's machine the test is skipped with a
//! message; under CI (`EDGEPOP_REQUIRE_ALL=1`, set by `.ci/run`) it fails, so a missing install
//! step can never pass as green.

pub mod cassettes;
pub mod cilium_chart;
pub mod control_plane;
pub mod crawler_ranges;
pub mod crds;
pub mod http;
pub mod istiod;
pub mod json;
pub mod key_directory;
pub mod oci_image;
pub mod openssl;
pub mod process;
pub mod scaleway;
pub mod sshd;
pub mod standin;
pub mod talos_node;
pub mod tunnel;
pub mod upstream;
pub mod workspace;

/// A port free on 127.0.0.1 when asked: bound, then released (a program that gets it binds it
/// a moment later; a test that wants nothing listening there leaves it so).
#[allow(clippy::panic)] // a test helper
pub fn free_port() -> u16 {
    match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(addr) => addr.port(),
        Err(err) => panic!("no free port on 127.0.0.1: {err}"),
    }
}

/// A port free on 127.0.0.1 below the kernel's ephemeral range, for a server a test stops and
/// starts again on the same port. While it is down, a port in that range can be given to any
/// outgoing connection as its local port (with many tests at once, some connection opens every
/// few milliseconds; one of the server's own clients redialling it may even connect to itself),
/// and the restart then fails with "address already in use".
#[allow(clippy::panic)] // a test helper
pub fn port_outside_ephemeral_range() -> u16 {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let low = 10_000u16.min(ephemeral_low / 2);
    let span = u64::from(ephemeral_low - low);
    // A start that differs between the test processes and threads running at once.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()))
        ^ u64::from(std::process::id()).wrapping_mul(2_654_435_761);
    for step in 0..span {
        let offset = (seed.wrapping_add(step.wrapping_mul(7919))) % span;
        let port = low + u16::try_from(offset).unwrap_or(0);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 between {low} and {ephemeral_low}")
}

/// The variable that turns every skip into a failure.
pub const REQUIRE_ALL_VAR: &str = "EDGEPOP_REQUIRE_ALL";

/// Whether skips are forbidden (CI).
pub fn require_all() -> bool {
    std::env::var(REQUIRE_ALL_VAR).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Reports that a test cannot run because `missing` is absent. Panics (fails the test) when
/// skips are forbidden; otherwise prints the reason on stderr. The caller returns right after.
#[allow(clippy::panic)] // failing the test is the point under CI
pub fn skip_or_fail(test: &str, missing: &str) {
    if require_all() {
        panic!(
            "{test}: {missing} is missing and {REQUIRE_ALL_VAR} is set: a skip is a failure here"
        );
    }
    // Straight to the process's stderr, not through eprintln!: libtest captures the print
    // macros of a passing test, and `make test` counts these lines.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {missing} is missing (set {REQUIRE_ALL_VAR}=1 to make this fail)"
    );
}

/// `len` pseudo-random bytes (xorshift64 from `seed`, low byte of each step): data that does not
/// compress, so a file made of them keeps its size through zstd or QCOW2, without a rand
/// dependency. The same seed gives the same bytes.
pub fn incompressible_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

/// A file named `name` holding `contents`, alone in a fresh temporary folder: the folder (the
/// file goes when it is dropped) and the file's path.
#[allow(clippy::unwrap_used)] // a test helper: a failed write fails the test
pub fn temp_file(
    name: &str,
    contents: impl AsRef<[u8]>,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, contents).unwrap();
    (dir, path)
}

/// The first `count` lines of the text file at `path`, each ending with a newline: a smaller
/// list cut from a captured one.
#[allow(clippy::unwrap_used)] // a test helper: an unreadable capture fails the test
pub fn first_lines(path: &std::path::Path, count: usize) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .take(count)
        .map(|line| format!("{line}\n"))
        .collect()
}

/// The names of the entries of `dir`, sorted: what a test compares to say that nothing else (a
/// temporary file, a partial write) was left there.
#[allow(clippy::unwrap_used)] // a test helper: an unreadable directory fails the test
pub fn file_names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Every file under `dir`, at any depth, sorted. A symbolic link is listed as a file and never
/// followed, so the walk stays inside `dir`.
#[allow(clippy::unwrap_used)] // a test helper: an unreadable directory fails the test
pub fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(next) = dirs.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                dirs.push(entry.path());
            } else {
                files.push(entry.path());
            }
        }
    }
    files.sort();
    files
}

/// Looks every half second, for two minutes at most, until `look` gives a value: what a test
/// waits for from a controller or a server that acts on its own time (pop-common's one bounded
/// loop). Fails the test naming `what` when the time is up.
#[allow(clippy::panic)] // a test helper: failing is its job
#[track_caller]
pub fn eventually<T>(what: &str, mut look: impl FnMut() -> Option<T>) -> T {
    use pop_common::wait::{Poll, ThreadSleeper};
    let poll = Poll::within(
        std::time::Duration::from_secs(120),
        std::time::Duration::from_millis(500),
    );
    match poll.until(
        &ThreadSleeper,
        |_| Ok::<_, std::convert::Infallible>(look()),
    ) {
        Ok(Some(found)) => found,
        Ok(None) | Err(_) => panic!("not within {:?}: {what}", poll.span()),
    }
}

/// The pin `key` of `k8s/versions.env`, read with the one reader of that file; a key that is not
/// pinned fails the test.
#[allow(clippy::panic)] // a test helper: a pin that cannot be read fails the test, saying which
pub fn pin(key: &str) -> String {
    let path = workspace::root().join(pop_common::pins::FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) => panic!("{}: {err}", path.display()),
    };
    match pop_common::pins::Pins::new(&text).get(key) {
        Some(value) => value.to_owned(),
        None => panic!("{key} is not pinned in {}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn incompressible_bytes_are_spread_and_repeatable() {
        let a = super::incompressible_bytes(4096, 0x9e37_79b9_7f4a_7c15);
        assert_eq!(a.len(), 4096);
        assert_eq!(a, super::incompressible_bytes(4096, 0x9e37_79b9_7f4a_7c15));
        let distinct: std::collections::BTreeSet<u8> = a.iter().copied().collect();
        assert!(distinct.len() > 200, "{} distinct bytes", distinct.len());
    }
}
