//! The two programs a backup runs: the real talosctl for the snapshot (its stream, its checks
//! of the file, its status line are upstream's own) and the real age for the encryption.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use pop_common::records::EtcdSnapshotStatus;

use crate::Error;

/// What a backup asks of the cluster and of age.
pub trait Snapshots {
    /// Streams a snapshot of the etcd member of the control plane at `node` into `path`
    /// (written 0600); etcd's status of it.
    fn snapshot(&self, node: &str, path: &Path) -> Result<EtcdSnapshotStatus, Error>;
    /// Encrypts `plain` to `recipient` into `sealed`.
    fn encrypt(&self, recipient: &str, plain: &Path, sealed: &Path) -> Result<(), Error>;
}

/// The real programs.
#[derive(Debug, Clone)]
pub struct Programs {
    pub talosctl: PathBuf,
    pub talosconfig: PathBuf,
    pub age: PathBuf,
}

impl Snapshots for Programs {
    fn snapshot(&self, node: &str, path: &Path) -> Result<EtcdSnapshotStatus, Error> {
        // talosctl always names a node (cmd/talosctl/pkg/talos/global/client.go l.83-96 at
        // v1.13.9), and the endpoint's apid forwards the call to it (internal/app/apid/pkg/
        // director/director.go l.100-101), itself included.
        let said = run(
            "talosctl",
            Command::new(&self.talosctl)
                .arg("--talosconfig")
                .arg(&self.talosconfig)
                .args(["--nodes", node, "etcd", "snapshot"])
                .arg(path),
        )?;
        for line in said.lines() {
            pop_common::info!("talosctl: {line}");
        }
        parse_snapshot_info(&said).ok_or_else(|| Error::Program {
            program: "talosctl",
            message: format!("no `snapshot info:` line in what it said: {said:?}"),
        })
    }

    fn encrypt(&self, recipient: &str, plain: &Path, sealed: &Path) -> Result<(), Error> {
        run(
            "age",
            Command::new(&self.age)
                .args(["--encrypt", "--recipient", recipient, "--output"])
                .arg(sealed)
                .arg(plain),
        )
        .map(drop)
    }
}

/// Runs `command`; its stdout, or an error with the first line it wrote to stderr (talosctl
/// and age write the error first; talosctl follows it with its usage).
fn run(program: &'static str, command: &mut Command) -> Result<String, Error> {
    let out: Output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|err| Error::Program {
            program,
            message: format!(
                "cannot run {}: {err}",
                command.get_program().to_string_lossy()
            ),
        })?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(Error::Program {
        program,
        message: stderr
            .lines()
            .find(|l| !l.trim().is_empty())
            .map_or_else(|| format!("failed ({})", out.status), str::to_owned),
    })
}

/// talosctl's `snapshot info: hash %08x, revision %d, total keys %d, total size %d` line
/// (cmd/talosctl/cmd/talos/etcd.go l.395-396 at v1.13.9).
pub fn parse_snapshot_info(said: &str) -> Option<EtcdSnapshotStatus> {
    let info = said
        .lines()
        .find_map(|l| l.trim().strip_prefix("snapshot info: "))?;
    let mut fields = info.split(", ");
    let mut field = |name: &str| fields.next()?.strip_prefix(name).map(str::to_owned);
    let hash = field("hash ")?;
    let revision = field("revision ")?.parse().ok()?;
    let total_keys = field("total keys ")?.parse().ok()?;
    let total_size = field("total size ")?.parse().ok()?;
    (hash.len() == 8 && hash.bytes().all(|b| b.is_ascii_hexdigit())).then_some(EtcdSnapshotStatus {
        hash,
        revision,
        total_keys,
        total_size,
    })
}
