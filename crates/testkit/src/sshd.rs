//! A real OpenSSH server on loopback standing for Scaleway's rescue system, for the tests and
//! the bench: started on a free port with a throwaway host key and user key, as the user running
//! the test; its "disk" is a file and `lsblk` a script first on the session's PATH.
#![allow(clippy::unwrap_used, clippy::panic)] // a test helper: a rescue that cannot start fails the test

use std::fs;
use std::io::Read;
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

#[derive(Debug)]
pub struct Sshd {
    child: Child,
    pub port: u16,
}

impl Sshd {
    /// CPU seconds used so far by the daemon and the sessions it has reaped (with what they
    /// ran: the shells, `dd`, `zstd`).
    pub fn cpu_seconds(&self) -> f64 {
        let (own, children) = cpu_seconds(&self.child.id().to_string());
        own + children
    }
}

/// CPU seconds used so far by process `pid` (`self` for this one; all its threads) and by the
/// children it has waited for, from /proc/PID/stat (utime + stime, cutime + cstime, in
/// USER_HZ = 100 ticks).
pub fn cpu_seconds(pid: &str) -> (f64, f64) {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after "(comm) ": state is index 0, utime 11, stime 12, cutime 13, cstime 14.
    let fields: Vec<f64> = stat[stat.rfind(')').unwrap() + 2..]
        .split(' ')
        .map(|field| field.parse().unwrap_or(0.0))
        .collect();
    (
        (fields[11] + fields[12]) / 100.0,
        (fields[13] + fields[14]) / 100.0,
    )
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory with the keys, the sshd config and the session's bin/, and one under /dev/ with
/// the disk file (the tool takes only device paths under /dev/ as disks: /dev/shm is one).
#[derive(Debug)]
pub struct Rescue {
    pub dir: tempfile::TempDir,
    pub devices: tempfile::TempDir,
    pub user: String,
}

impl Rescue {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    pub fn disk(&self) -> PathBuf {
        self.devices.path().join("disk.img")
    }
    /// The rescue user's `sudo`, first on the session's PATH: it asks for the rescue password
    /// (the one the API gave, which the Scaleway stand-in writes to `password` here), read from
    /// standard input with -S, as Ubuntu's sudo for a regular user does; -n fails. Logs its
    /// argv to `sudo.log`.
    pub fn sudo_that_asks_for_the_password(&self) {
        let dir = self.dir.path().display();
        script(
            &self.path("bin/sudo"),
            &format!(
                "#!/bin/bash\n\
                 printf '%s\\n' \"$*\" >> {dir}/sudo.log\n\
                 noninteractive=0; stdin=0\n\
                 while [ $# -gt 0 ]; do case \"$1\" in\n\
                   -n) noninteractive=1;; -S) stdin=1;; -k) ;; -p) shift;; --) shift; break;;\n\
                   -*) echo \"sudo: unknown option $1\" >&2; exit 1;; *) break;; esac; shift; done\n\
                 if [ $noninteractive = 1 ]; then echo 'sudo: a password is required' >&2; exit 1; fi\n\
                 if [ $stdin = 0 ]; then echo 'sudo: a terminal is required to read the password' >&2; exit 1; fi\n\
                 IFS= read -r line || {{ echo 'sudo: no password was provided' >&2; exit 1; }}\n\
                 [ \"$line\" = \"$(cat {dir}/password)\" ] || {{ echo 'sudo: 1 incorrect password attempt' >&2; exit 1; }}\n\
                 exec \"$@\"\n"
            ),
        );
    }

    /// The `lsblk` the session finds first on its PATH.
    pub fn lsblk(&self, devices: Value) {
        let body = json!({ "blockdevices": devices }).to_string();
        script(
            &self.path("bin/lsblk"),
            &format!("#!/bin/sh\ncat <<'EOF'\n{body}\nEOF\n"),
        );
    }
    /// The disk as the rescue's lsblk shows it: `size` bytes, `mounts` on one partition.
    pub fn disk_device(&self, size: u64, mounts: &[&str]) -> Value {
        let mountpoints: Vec<Value> = if mounts.is_empty() {
            vec![Value::Null]
        } else {
            mounts.iter().map(|m| json!(m)).collect()
        };
        json!({"name": self.disk(), "maj:min": "8:0", "rm": false, "size": size, "ro": false,
               "type": "disk", "mountpoints": [null],
               "children": [{"name": format!("{}1", self.disk().display()), "maj:min": "8:1",
                             "rm": false, "size": 1048576, "ro": false, "type": "part",
                             "mountpoints": mountpoints}]})
    }
}

pub fn script(path: &Path, text: &str) {
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

pub fn sshd_binary(test: &str) -> Option<PathBuf> {
    let sshd = PathBuf::from("/usr/sbin/sshd");
    let keygen = Command::new("ssh-keygen").arg("-?").output().is_ok();
    if sshd.is_file() && keygen {
        Some(sshd)
    } else {
        crate::skip_or_fail(test, "sshd and ssh-keygen (apt-get install openssh-server)");
        None
    }
}

/// The rescue system at 127.0.0.1, on a free port.
pub fn rescue(test: &str) -> Option<(Rescue, Sshd)> {
    rescue_at(test, "127.0.0.1", crate::free_port())
}

/// The rescue system of another machine: its sshd listening at `address` (any of 127/8, all
/// loopback on Linux), on `port`, so that machines at several addresses answer on the one port
/// the flashing tool is told. The address is written to the rescue's `address` file, where the
/// Scaleway stand-in reads the address of the server that boots into it.
pub fn rescue_at(test: &str, address: &str, port: u16) -> Option<(Rescue, Sshd)> {
    let sshd = sshd_binary(test)?;
    let dir = tempfile::tempdir().unwrap();
    let Ok(devices) = tempfile::Builder::new()
        .prefix("edgepop-rescue-")
        .tempdir_in("/dev/shm")
    else {
        crate::skip_or_fail(
            test,
            "a writable /dev/shm (the rescue disk: a file under /dev/)",
        );
        return None;
    };
    let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_owned();
    let rescue = Rescue { dir, devices, user };
    for key in ["host_key", "user_key"] {
        let out = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(rescue.path(key))
            .output()
            .unwrap();
        crate::process::success_stdout(&out);
    }
    fs::copy(rescue.path("user_key.pub"), rescue.path("authorized_keys")).unwrap();
    fs::create_dir(rescue.path("bin")).unwrap();
    rescue.lsblk(json!([]));
    fs::write(rescue.path("address"), address).unwrap();
    let config = format!(
        "Port {port}\nListenAddress {address}\nHostKey {dir}/host_key\nPidFile none\n\
         AuthorizedKeysFile {dir}/authorized_keys\nStrictModes no\nUsePAM no\n\
         PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
         PermitRootLogin prohibit-password\nSetEnv PATH={dir}/bin:/usr/bin:/bin:/usr/sbin:/sbin\n",
        dir = rescue.dir.path().display()
    );
    fs::write(rescue.path("sshd_config"), config).unwrap();
    // sshd started as root wants its privilege-separation directory (the service unit makes it).
    if rescue.user == "root" {
        fs::create_dir_all("/run/sshd").unwrap();
    }
    let child = Command::new(sshd)
        .args(["-D", "-e", "-f"])
        .arg(rescue.path("sshd_config"))
        .stdin(Stdio::null())
        .stderr(fs::File::create(rescue.path("sshd.log")).unwrap())
        .spawn()
        .unwrap();
    let sshd = Sshd { child, port };
    for _ in 0..100 {
        if let Ok(mut stream) = TcpStream::connect((address, port)) {
            let mut banner = [0u8; 4];
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            if stream.read_exact(&mut banner).is_ok() && &banner == b"SSH-" {
                return Some((rescue, sshd));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!(
        "sshd did not start: {}",
        fs::read_to_string(rescue.path("sshd.log")).unwrap()
    );
}

/// Writes `path` (executable): a script that appends `<its name> <its arguments>` to `log` when
/// one of the `secrets` variables is in its environment, then runs `then` (shell); what a test
/// puts in front of a program that must not get a credential.
pub fn secret_noting_script(path: &Path, secrets: &[&str], log: &Path, then: &str) {
    script(
        path,
        &format!(
            "#!/bin/sh\nif env | grep -qE '^({})='; then\n  echo \"${{0##*/}} $*\" >> '{}'\nfi\n{then}\n",
            secrets.join("|"),
            log.display()
        ),
    );
}
