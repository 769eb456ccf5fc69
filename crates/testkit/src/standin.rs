//! The stand-ins of the APIs that cannot run on a test machine (Scaleway, S3, a Talos node in
//! maintenance mode and talosctl's calls to a configured one, the Kubernetes API for the
//! pipelines) and the recording `helm`, `kubectl` and
//! `talosctl`, all in `stand-ins/` beside this crate. The Python servers run as child processes
//! on loopback: each binds an ephemeral port on 127.0.0.1 and writes it (atomically, by rename) to
//! a port file once it listens. [`StandIn`] starts one, waits for that port and kills it on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// How long a stand-in may take to listen (Python's start-up, and the Scaleway stand-in's
/// loading of the OpenAPI specs, on a loaded 2-core machine).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A file or folder of `stand-ins/` (a script, or `recording` for the recording tools), found
/// relative to this crate, wherever the test that asks runs from.
pub fn path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("stand-ins")
        .join(name)
}

/// `python3 <testkit>/stand-ins/<script>`, to which the caller adds the script's arguments
/// before [`StandIn::start`].
pub fn python(script: &str) -> Command {
    let mut command = Command::new("python3");
    command.arg(path(script));
    command
}

/// A running stand-in; killed (and reaped) on drop.
#[derive(Debug)]
pub struct StandIn {
    child: Child,
    port: u16,
}

impl StandIn {
    /// Spawns `command` and waits until it has written its port to `port_file`. Fails the test
    /// when it cannot start, exits first, or does not listen within a minute.
    #[allow(clippy::panic)] // a test helper: a stand-in that does not start fails the test
    pub fn start(command: &mut Command, port_file: &Path) -> StandIn {
        let child = match command.spawn() {
            Ok(child) => child,
            Err(err) => panic!("cannot start the stand-in {command:?}: {err}"),
        };
        // From here on, a panic drops (kills) the child.
        let mut stand_in = StandIn { child, port: 0 };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(text) = std::fs::read_to_string(port_file) {
                match text.trim().parse() {
                    Ok(port) => {
                        stand_in.port = port;
                        return stand_in;
                    }
                    Err(_) => panic!("{}: not a port: {text:?}", port_file.display()),
                }
            }
            if let Ok(Some(status)) = stand_in.child.try_wait() {
                panic!("the stand-in {command:?} exited before listening: {status}");
            }
            if Instant::now() >= deadline {
                panic!("the stand-in {command:?} did not listen within {START_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the talosctl stand-in (`stand-ins/talosctl`, whose state is `$TALOSCTL_STATE`, here
/// `state`) keeps the active machine config of the node at `address`: what `patch
/// machineconfig` patches. A node out of maintenance mode always has one.
pub fn talos_node_config(state: &Path, address: &str) -> PathBuf {
    state.join(address).join("config.yaml")
}

/// Gives the node at `address` of the talosctl stand-in's `state` the machine config `config`,
/// as the node holds the config it took (0600: a machine config holds the cluster's secrets).
#[allow(clippy::panic)] // a test helper: a state it cannot write fails the test
pub fn write_talos_node_config(state: &Path, address: &str, config: &[u8]) {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = talos_node_config(state, address);
    let written = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
        })
        .and_then(|mut file| file.write_all(config));
    if let Err(err) = written {
        panic!("cannot write {}: {err}", path.display());
    }
}

/// The Scaleway stand-in's command (`scaleway_api.py`, checking every request against the
/// shared OpenAPI specs, its objects shaped like the shared recordings), writing its port to
/// `port_file` and logging each request to `log`; the caller adds its own arguments.
fn scaleway_api(
    shared: &Path,
    port_file: &Path,
    log: &Path,
    secret: &str,
    project: &str,
) -> Command {
    let mut command = python("scaleway_api.py");
    command
        .arg("--specs")
        .arg(shared.join("scaleway-openapi"))
        .arg("--cassettes")
        .arg(shared.join("scaleway-cassettes"))
        .arg("--port-file")
        .arg(port_file)
        .arg("--log")
        .arg(log)
        .args(["--secret", secret, "--project", project]);
    command
}

/// The S3 stand-in (`s3_api.py`, SigV4 checked with `access_key`/`secret`, region `fr-par`)
/// keeping its objects in `dir/s3` and logging requests to `dir/s3.jsonl` (port file
/// `dir/s3-port`).
pub fn s3(dir: &Path, access_key: &str, secret: &str) -> StandIn {
    let port_file = dir.join("s3-port");
    StandIn::start(
        python("s3_api.py")
            .arg("--root")
            .arg(dir.join("s3"))
            .arg("--port-file")
            .arg(&port_file)
            .arg("--log")
            .arg(dir.join("s3.jsonl"))
            .args(["--access-key", access_key, "--secret", secret])
            .args(["--region", "fr-par"]),
        &port_file,
    )
}

/// The Scaleway API stand-in (`scaleway_api.py`, every request checked against the specs in
/// `shared/scaleway-openapi`, objects shaped like `shared/scaleway-cassettes`), accepting
/// `secret` and making what it is asked in `project`; with `dns_zone`, a zone it hosts for that
/// project. It logs requests to `dir/requests.jsonl` and reads the image bucket's objects from
/// the S3 stand-in's root (`dir/s3`, see [`s3`]).
pub fn scaleway(
    shared: &Path,
    dir: &Path,
    secret: &str,
    project: &str,
    dns_zone: Option<&str>,
) -> StandIn {
    scaleway_with(shared, dir, secret, project, dns_zone, &[])
}

/// [`scaleway`] whose Elastic Metal servers boot into a rescue system: the real sshd of a
/// [`crate::sshd::Rescue`], whose `authorized_keys` and `password` a rescue boot writes, for the
/// user `rescue.user`.
pub fn scaleway_with_rescue(
    shared: &Path,
    dir: &Path,
    secret: &str,
    project: &str,
    rescue: &crate::sshd::Rescue,
) -> StandIn {
    scaleway_with_rescues(shared, dir, secret, project, &[("", rescue)])
}

/// The Scaleway stand-in with a rescue system a server: each `(name, rescue)` the one the
/// server ordered (or seeded) under `name` boots into, whose address it gets (the rescue's
/// `address` file, which [`crate::sshd::rescue_at`] writes); the name `""`, every server no
/// other pair names, its address left to the stand-in.
pub fn scaleway_with_rescues(
    shared: &Path,
    dir: &Path,
    secret: &str,
    project: &str,
    rescues: &[(&str, &crate::sshd::Rescue)],
) -> StandIn {
    let mut extra: Vec<String> = Vec::new();
    for (name, rescue) in rescues {
        extra.push("--rescue-dir".into());
        extra.push(format!("{name}={}", rescue.dir.path().display()));
    }
    if let Some((_, rescue)) = rescues.first() {
        extra.extend(["--rescue-user".into(), rescue.user.clone()]);
    }
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    scaleway_with(shared, dir, secret, project, None, &extra)
}

fn scaleway_with(
    shared: &Path,
    dir: &Path,
    secret: &str,
    project: &str,
    dns_zone: Option<&str>,
    extra: &[&str],
) -> StandIn {
    let port_file = dir.join("scaleway-port");
    let mut command = scaleway_api(
        shared,
        &port_file,
        &dir.join("requests.jsonl"),
        secret,
        project,
    );
    command.arg("--s3-root").arg(dir.join("s3"));
    if let Some(zone) = dns_zone {
        command.args(["--dns-zone", zone]);
    }
    command.args(extra);
    StandIn::start(&mut command, &port_file)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;

    #[test]
    fn a_stand_in_that_exits_before_listening_fails_at_once() {
        let dir = std::env::temp_dir().join(format!("testkit-standin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let port_file = dir.join("never");
        let started = std::panic::catch_unwind(|| {
            StandIn::start(Command::new("sh").args(["-c", "exit 3"]), &port_file)
        });
        let message = *started.unwrap_err().downcast::<String>().unwrap();
        assert!(message.contains("exited before listening"), "{message}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_port_is_read_from_the_port_file() {
        let dir = std::env::temp_dir().join(format!("testkit-port-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let port_file = dir.join("port");
        let script = format!(
            "echo 4321 > {0}.tmp && mv {0}.tmp {0} && sleep 30",
            port_file.display()
        );
        let stand_in = StandIn::start(Command::new("sh").args(["-c", &script]), &port_file);
        assert_eq!(stand_in.port(), 4321);
        assert_eq!(stand_in.url(), "http://127.0.0.1:4321");
        drop(stand_in);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A server ordered under a name with a rescue of its own gets that rescue's address, and
    /// its boot into rescue writes that rescue's keys and password alone.
    #[test]
    fn each_elastic_metal_server_boots_into_its_own_rescue_at_its_address() {
        const TEST: &str = "each_elastic_metal_server_boots_into_its_own_rescue";
        const SECRET: &str = "44444444-4444-4444-8444-444444444444";
        let Some(shared) = crate::workspace::shared_dir(TEST) else {
            return;
        };
        let Some((first, first_sshd)) =
            crate::sshd::rescue_at(TEST, "127.0.0.3", crate::free_port())
        else {
            return;
        };
        let (second, _second_sshd) =
            crate::sshd::rescue_at(TEST, "127.0.0.4", first_sshd.port).unwrap();
        for rescue in [&first, &second] {
            std::fs::write(rescue.path("authorized_keys"), "").unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let stand_in = scaleway_with_rescues(
            &shared,
            dir.path(),
            SECRET,
            "33333333-3333-4333-8333-333333333333",
            &[("worker-a", &first), ("worker-b", &second)],
        );
        let url = stand_in.url();
        let seed = |body: serde_json::Value| crate::scaleway::control(&url, "seed", Some(&body));
        let public_key = std::fs::read_to_string(second.path("user_key.pub")).unwrap();
        let key = seed(serde_json::json!({"kind": "ssh_key", "name": "k",
                                          "public_key": public_key.trim()}));
        let mut ids = Vec::new();
        for (name, address) in [("worker-a", "127.0.0.3"), ("worker-b", "127.0.0.4")] {
            let server = seed(serde_json::json!({"kind": "baremetal_server", "name": name,
                                                 "status": "stopped"}));
            assert_eq!(server["ips"][0]["address"], address, "{server}");
            ids.push(server["id"].as_str().unwrap().to_owned());
        }

        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(true)
            .build()
            .into();
        agent
            .post(format!(
                "{url}/baremetal/v1/zones/fr-par-1/servers/{}/start",
                ids[1]
            ))
            .header("X-Auth-Token", SECRET)
            .header("Content-Type", "application/json")
            .send(
                serde_json::json!({"boot_type": "rescue", "ssh_key_ids": [key["id"]]}).to_string(),
            )
            .unwrap();
        let read = |rescue: &crate::sshd::Rescue, file: &str| {
            std::fs::read_to_string(rescue.path(file)).unwrap_or_default()
        };
        assert_eq!(read(&second, "authorized_keys").trim(), public_key.trim());
        assert_eq!(read(&second, "password").len(), 32);
        assert_eq!(
            (read(&first, "authorized_keys"), read(&first, "password")),
            (String::new(), String::new())
        );
    }
}
