//! scw-rescue-flash end to end, on loopback:
//! - the Elastic Metal API is testkit's `scaleway_api.py`, which checks every request against
//!   Scaleway's OpenAPI and behaves as a server ordered without an OS does: no reboot, a stop
//!   then a start into rescue with `ssh_key_ids`, whose public keys (and no other) it writes into
//!   the rescue system's authorized_keys, its rescue credentials a poll after `ready`;
//! - the rescue system is a real OpenSSH server (Debian's openssh-server), started here on a free
//!   port with a throwaway host key; its user is not root: its `sudo` (a shim first on the
//!   session's PATH) asks for the rescue password the API gave, on standard input; its "disk" is
//!   a file, and `lsblk` a script printing what `lsblk --json -b -p` prints in Scaleway's rescue.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cell::RefCell;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use testkit::free_port;
use testkit::http::{Reply, Server};
use testkit::sshd::{Rescue, Sshd, rescue, script};

const SECRET: &str = "33333333-3333-4333-8333-333333333333";
const PROJECT: &str = "22222222-2222-4222-8222-222222222222";
const OURS: [&str; 3] = [
    "edgepop-cluster=edge-par",
    "edgepop-role=worker",
    "edgepop-node=edge-worker-1",
];

/// A raw image of 12 MiB like a disk's (64 KiB blocks of random bytes between blocks of zeros:
/// a misplaced block shows), and its .zst, half as large: worth sending compressed, and large
/// enough that a stream cut after the first MiB is cut while it is still being sent (SSH and
/// pipe buffers hold a few MiB at most).
fn image(dir: &Path) -> (PathBuf, Vec<u8>) {
    let mut raw = testkit::incompressible_bytes((12 << 20) + 12345, 0x5eed);
    for block in raw.chunks_mut(64 << 10).skip(1).step_by(2) {
        block.fill(0);
    }
    let path = dir.join("metal-amd64.raw.zst");
    fs::write(&path, zstd::encode_all(raw.as_slice(), 3).unwrap()).unwrap();
    (path, raw)
}

fn sha256(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// The Scaleway stand-in, with one worker server and the IAM key of the rescue tests' user key.
struct Api {
    _stand_in: testkit::standin::StandIn,
    url: String,
    log: PathBuf,
    /// The id of the server the inventories name; a test may point at another (a cell: the
    /// runs borrow the setup while a test moves between servers).
    server: RefCell<String>,
    key: String,
}

impl Api {
    fn start(test: &str, rescue: &Rescue, tags: &[&str]) -> Option<Api> {
        let shared = testkit::workspace::shared_dir(test)?;
        let stand_in = testkit::standin::scaleway_with_rescue(
            &shared,
            rescue.dir.path(),
            SECRET,
            PROJECT,
            rescue,
        );
        let log = rescue.path("requests.jsonl");
        let mut api = Api {
            url: stand_in.url(),
            _stand_in: stand_in,
            log,
            server: RefCell::default(),
            key: String::new(),
        };
        let public_key = fs::read_to_string(rescue.path("user_key.pub")).unwrap();
        api.key = api.seed_id(json!({"kind": "ssh_key", "name": "edgepop-edge-par",
                                  "public_key": public_key.trim()}));
        api.point_at(api.seed_worker(tags, &[]));
        Some(api)
    }

    fn control(&self, path: &str, body: Option<Value>) -> Value {
        testkit::scaleway::control(&self.url, path, body.as_ref())
    }

    /// Seeds an object; its id.
    fn seed_id(&self, body: Value) -> String {
        self.control("seed", Some(body))["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Seeds a server named as our worker, at 127.0.0.1, carrying `tags`, with the `more`
    /// fields; its id.
    fn seed_worker(&self, tags: &[&str], more: &[(&str, &str)]) -> String {
        let mut body = json!({"kind": "baremetal_server", "name": "edge-worker-1",
                              "tags": tags, "address": "127.0.0.1"});
        for (field, value) in more {
            body[*field] = json!(value);
        }
        self.seed_id(body)
    }

    /// The id of the server the inventories name.
    fn server_id(&self) -> String {
        self.server.borrow().clone()
    }

    /// Points the inventories at the server `id`; the id pointed at before.
    fn point_at(&self, id: String) -> String {
        self.server.replace(id)
    }

    /// The server as the API holds it now.
    fn server(&self) -> Value {
        let state = self.control("state", None);
        testkit::json::element(&state["bm_servers"], "/id", self.server_id()).clone()
    }

    /// Every request so far, each checked: the secret key sent, nothing refused by the spec.
    fn requests(&self) -> Vec<Value> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .inspect(|r| {
                assert_eq!(r["token"], true, "{r}");
                assert!(r.get("refused").is_none(), "refused by the spec: {r}");
            })
            .collect()
    }

    /// The calls that change something, as `METHOD last-path-segment [boot_type]`.
    fn mutations(&self) -> Vec<String> {
        let server = self.server_id();
        self.requests()
            .iter()
            .filter(|r| r["method"] != "GET")
            .map(|r| {
                let action = r["path"].as_str().unwrap().rsplit('/').next().unwrap();
                let action = if action == server { "server" } else { action };
                match r["body"]["boot_type"].as_str() {
                    Some(boot) => format!("{} {action} {boot}", r["method"].as_str().unwrap()),
                    None => format!("{} {action}", r["method"].as_str().unwrap()),
                }
            })
            .collect()
    }

    /// Points at a new server of ours, ready in normal boot, with no image tag: the disk an
    /// earlier case wrote is not taken for written (its tag stays on the server before).
    fn fresh_server(&self) {
        self.point_at(self.seed_worker(&OURS, &[]));
    }

    fn inventory(&self, steps: &str) -> String {
        self.inventory_with_keys(steps, &[self.key.as_str()])
    }

    fn inventory_with_keys(&self, steps: &str, keys: &[&str]) -> String {
        json!({"kind": "NodeInventory", "version": 2, "cluster_name": "edge-par",
               "cluster_endpoint": "https://api.example.com:6443", "ssh_key_ids": keys,
               "nodes": [
                 {"name": "edge-par-cp-1", "role": "controlplane", "kind": "instance",
                  "zone": "fr-par-1", "id": "11111111-1111-4111-8111-111111111111",
                  "public_ipv4": "192.0.2.11", "public_ipv6": null, "private_ipv4": null, "steps": {}},
                 {"name": "edge-worker-1", "role": "worker", "kind": "elastic-metal",
                  "zone": "fr-par-1", "id": self.server_id(), "public_ipv4": "127.0.0.1",
                  "public_ipv6": null, "private_ipv4": null,
                  "steps": serde_json::from_str::<Value>(steps).unwrap()}]})
        .to_string()
    }
}

/// What each flashing test starts from: a rescue system (sshd) whose authorized_keys is empty
/// until the API boots the server into rescue, whose sudo wants the password, with an empty
/// 16 MiB disk; the API with our worker; an image, with its raw bytes.
struct Setup {
    rescue: Rescue,
    sshd: Sshd,
    api: Api,
    image: PathBuf,
    raw: Vec<u8>,
}

impl Setup {
    /// The setup of a worker carrying our tags; `None` when a prerequisite is missing (skipped).
    fn new(test: &str) -> Option<Setup> {
        Setup::tagged(test, &OURS)
    }

    /// [`Setup::new`] for a worker our tags record as flashed with an older image: that image's
    /// digest, and the setup.
    fn flashed_before(test: &str) -> Option<(String, Setup)> {
        let old = format!("sha256:{}", "0".repeat(64));
        let running = format!("edgepop-image-flashed={old}");
        let mut tags = OURS.to_vec();
        tags.push(running.as_str());
        let setup = Setup::tagged(test, &tags)?;
        Some((old, setup))
    }

    /// [`Setup::new`], the worker server carrying `tags`.
    fn tagged(test: &str, tags: &[&str]) -> Option<Setup> {
        let (rescue, sshd) = rescue(test)?;
        fs::write(rescue.path("authorized_keys"), "").unwrap();
        rescue.sudo_that_asks_for_the_password();
        rescue.lsblk(json!([rescue.disk_device(16 << 20, &[])]));
        let api = Api::start(test, &rescue, tags)?;
        let (image, raw) = image(rescue.dir.path());
        Some(Setup {
            rescue,
            sshd,
            api,
            image,
            raw,
        })
    }

    /// One run with the inventory `stdin`.
    fn flash(&self, stdin: &str, extra: &[&str]) -> Output {
        self.flash_on(self.sshd.port, &self.image, stdin, extra)
    }

    /// One run on a one-worker inventory with no step done.
    fn flash_fresh(&self, extra: &[&str]) -> Output {
        self.flash(&self.api.inventory("{}"), extra)
    }

    /// [`Setup::flash`] of `image`, the rescue system's SSH on `port`.
    fn flash_on(&self, port: u16, image: &Path, stdin: &str, extra: &[&str]) -> Output {
        let key = self.rescue.path("user_key");
        self.run(&key, None, (port, image), stdin, extra)
    }

    /// [`Setup::flash`] logging in with the private key `key`, through the ssh-agent at `agent`
    /// when given (never the agent of the machine running the tests).
    fn flash_as(&self, key: &Path, agent: Option<&Path>, stdin: &str, extra: &[&str]) -> Output {
        self.run(key, agent, (self.sshd.port, &self.image), stdin, extra)
    }

    fn run(
        &self,
        key: &Path,
        agent: Option<&Path>,
        (port, image): (u16, &Path),
        stdin: &str,
        extra: &[&str],
    ) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_scw-rescue-flash"));
        command.env_remove("SSH_AUTH_SOCK");
        if let Some(agent) = agent {
            command.env("SSH_AUTH_SOCK", agent);
        }
        if !extra
            .iter()
            .any(|a| ["--tag-proven", "--tag-upgraded"].contains(a))
        {
            command.arg("--image").arg(image);
            // The rescue system's disk as the fallback, unless the inventory names each
            // node's own.
            if !stdin.contains("install_disk") {
                command.arg("--disk").arg(self.rescue.disk());
            }
        }
        testkit::process::run_with_stdin(
            command
                .arg("--ssh-key")
                .arg(key)
                .args(["--ssh-port", &port.to_string(), "--timeout-seconds", "20"])
                .args(["--ssh-tries", "20", "--ssh-interval-seconds", "0"])
                .args(extra)
                .env("SCW_ACCESS_KEY", "SCWXXXXXXXXXXXXXXXXX")
                .env("SCW_SECRET_KEY", SECRET)
                .env("SCW_DEFAULT_PROJECT_ID", PROJECT)
                // No config file of the machine's: the environment alone.
                .env("SCW_CONFIG_PATH", self.rescue.path("no-scw-config.yaml"))
                .env("SCW_API_URL", &self.api.url),
            stdin.as_bytes(),
        )
    }

    /// `--tag-proven` on an inventory that records the worker proven ours, refused (exit 1):
    /// its stderr.
    fn tag_proven_refused(&self) -> String {
        let proven = self
            .api
            .inventory(r#"{"image_flashed": "sha256:00", "config_applied": "sha256:11"}"#);
        let out = self.flash(&proven, &["--tag-proven"]);
        let stderr = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        stderr
    }

    /// A run that wrote the image: it succeeded, the disk holds the raw image, and the inventory
    /// it wrote records the Elastic Metal node's image as flashed, by its digest.
    fn flashed(&self, out: &Output) {
        let stdout = testkit::process::success_stdout(out);
        assert_eq!(self.disk_sha256(), sha256(&self.raw));
        let written: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(
            written["nodes"][1]["steps"]["image_flashed"],
            format!("sha256:{}", sha256(&self.raw))
        );
    }

    /// What the disk holds.
    fn disk(&self) -> Vec<u8> {
        fs::read(self.rescue.disk()).unwrap()
    }

    fn disk_sha256(&self) -> String {
        sha256(&self.disk())
    }

    /// The next case of a test: a new server of ours (see [`Api::fresh_server`]) whose disk
    /// holds `before`.
    fn next_case(&self) {
        self.api.fresh_server();
        self.write_disk(b"before");
    }

    /// The disk holds `bytes`, a stand-in for what a run must not touch.
    fn write_disk(&self, bytes: &[u8]) {
        fs::write(self.rescue.disk(), bytes).unwrap();
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn failed(out: &Output, needles: &[&str]) -> String {
    let stderr = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    testkit::process::assert_says_all(&stderr, needles);
    let written: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(written["nodes"][1]["steps"].get("image_flashed").is_none());
    stderr
}

/// The boot into rescue a server without an OS takes, the image written and read back, the
/// written tag, the normal boot.
const FLASHED: [&str; 5] = [
    "POST stop",
    "POST start rescue",
    "PATCH server",
    "POST stop",
    "POST start normal",
];

/// The server's tags: ours, and `image_tag`.
fn tags_with(image_tag: &str) -> Value {
    let mut tags: Vec<Value> = OURS.iter().map(|t| json!(t)).collect();
    tags.push(json!(image_tag));
    Value::Array(tags)
}

/// The rescue user's sudo got the password on its standard input (never on a command line,
/// never in a log); the host key was accepted for the session only and logged, as lsblk was.
fn assert_the_password_stays_secret_and_the_host_key_is_logged(
    rescue: &Rescue,
    api: &Api,
    stdout: &str,
    stderr: &str,
) {
    let password = fs::read_to_string(rescue.path("password")).unwrap_or_default();
    let sudo = fs::read_to_string(rescue.path("sudo.log")).unwrap();
    assert!(
        sudo.lines().any(|l| l.starts_with("-S -k -p  bash -c")),
        "{sudo}"
    );
    assert!(
        stderr.contains("needs the rescue password for sudo"),
        "{stderr}"
    );
    let sshd_log = fs::read_to_string(rescue.path("sshd.log")).unwrap();
    // (Empty now: the normal boot took the rescue system, and its password, away.)
    assert!(password.is_empty());
    let rescue_password = api
        .requests()
        .into_iter()
        .find_map(|r| {
            r["response"]["rescue_server"]["password"]
                .as_str()
                .map(str::to_owned)
        })
        .unwrap();
    for text in [sudo.as_str(), stderr, stdout, &sshd_log] {
        assert!(
            !text.contains(&rescue_password),
            "the password leaked: {text}"
        );
    }
    // The host key is accepted for this session only, and logged; lsblk is logged.
    let fingerprint = String::from_utf8(
        Command::new("ssh-keygen")
            .arg("-lf")
            .arg(rescue.path("host_key.pub"))
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let fingerprint = fingerprint.split_whitespace().nth(1).unwrap();
    assert!(
        stderr.contains(&format!(
            "rescue host key {fingerprint} accepted for this session only"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("lsblk: {\"blockdevices\""), "{stderr}");
    assert!(stderr.contains("verified (sha256"), "{stderr}");
    assert!(!stderr.contains(SECRET));
}

#[test]
fn the_image_lands_through_the_keys_given_by_id_and_sudo_and_the_tag_waits_for_the_proof() {
    let test = "the_image_lands_through_the_keys_given_by_id";
    let Some(setup) = Setup::new(test) else {
        return;
    };
    let Setup {
        rescue, api, raw, ..
    } = &setup;
    let out = setup.flash_fresh(&[]);
    let stdout = testkit::process::success_stdout(&out);
    let stderr = stderr(&out);

    // The bytes on the "disk" are the decompressed image's.
    let written = setup.disk();
    assert_eq!(written.len(), raw.len());
    assert_eq!(sha256(&written), sha256(raw));
    let inventory: Value = serde_json::from_str(&stdout).unwrap();
    let digest = format!("sha256:{}", sha256(raw));
    assert_eq!(inventory["nodes"][1]["steps"]["image_flashed"], digest);
    assert!(
        inventory["nodes"][0]["steps"]
            .get("image_flashed")
            .is_none(),
        "instances are not flashed"
    );
    // Stop, start into rescue with the key named by id (a server with no OS answers no
    // reboot), the written tag, then the same into the normal boot; no flashed tag yet: the node
    // is not proved ours.
    assert_eq!(api.mutations(), FLASHED);
    let starts: Vec<Value> = api
        .requests()
        .into_iter()
        .filter(|r| r["path"].as_str().unwrap().ends_with("/start"))
        .map(|r| r["body"].clone())
        .collect();
    assert_eq!(starts[0]["ssh_key_ids"], json!([api.key]));
    assert_eq!(
        api.server()["tags"],
        tags_with(&format!("edgepop-image-written={digest}"))
    );
    assert_the_password_stays_secret_and_the_host_key_is_logged(rescue, api, &stdout, &stderr);

    // Re-run with the inventory it wrote: nothing asked of Scaleway, nothing written.
    setup.write_disk(b"untouched");
    let requests = api.requests().len();
    let again = setup.flash(&stdout, &[]);
    assert_eq!(testkit::process::success_stdout(&again), stdout);
    assert_eq!(api.requests().len(), requests);
    assert_eq!(setup.disk(), b"untouched");

    // The tag waits for the proof: without config_applied, --tag-proven writes nothing...
    let tagged = setup.flash(&stdout, &["--tag-proven"]);
    assert_eq!(testkit::process::success_stdout(&tagged), stdout);
    assert!(stderr_of_contains(&tagged, "not proved ours yet"));
    assert_eq!(api.mutations(), FLASHED);
    // ...and once talos-apply-insecure recorded it (the node proved ours), the digest is tagged.
    let proven = stdout.replace(
        &format!("\"image_flashed\": \"{digest}\""),
        &format!("\"config_applied\": \"sha256:c0\",\n        \"image_flashed\": \"{digest}\""),
    );
    assert_ne!(proven, stdout);
    let tagged = setup.flash(&proven, &["--tag-proven"]);
    testkit::process::success_stdout(&tagged);
    // The flashed tag in place of the written one.
    let tags = tags_with(&format!("edgepop-image-flashed={digest}"));
    assert_eq!(api.server()["tags"], tags);
    // A proof that came a run late (found configured and ours, no config recorded) tags as
    // well: here on a second, untagged server of ours.
    let first = api.point_at(api.seed_worker(&OURS, &[]));
    let late = api.inventory(&format!(
        r#"{{"image_flashed": "{digest}", "proved_ours": "{digest}"}}"#
    ));
    testkit::process::success_stdout(&setup.flash(&late, &["--tag-proven"]));
    assert_eq!(api.server()["tags"], tags);
    api.point_at(first);

    // A fresh inventory (another machine): the server's tag says it is done; one GET, no boot.
    let before = api.requests().len();
    let fresh = setup.flash_fresh(&[]);
    let fresh_stdout = testkit::process::success_stdout(&fresh);
    let fresh_inventory: Value = serde_json::from_str(&fresh_stdout).unwrap();
    assert_eq!(
        fresh_inventory["nodes"][1]["steps"]["image_flashed"],
        digest
    );
    assert_eq!(api.requests().len(), before + 1);
    assert_eq!(setup.disk(), b"untouched");
}

fn stderr_of_contains(out: &Output, needle: &str) -> bool {
    stderr(out).contains(needle)
}

/// A real ssh-agent on a socket in `dir`, stopped when dropped.
struct Agent {
    child: std::process::Child,
    socket: PathBuf,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    fn start(dir: &Path) -> Agent {
        let socket = dir.join("agent.sock");
        let child = Command::new("ssh-agent")
            .arg("-D")
            .arg("-a")
            .arg(&socket)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        // Bounded: the agent makes its socket at once.
        for _ in 0..100 {
            if socket.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Agent { child, socket }
    }

    /// `ssh-add key`, its passphrase given by an askpass program (ssh-add reads none from a
    /// pipe), never on a command line.
    fn add(&self, dir: &Path, key: &Path, passphrase: &str) {
        let askpass = dir.join("askpass");
        fs::write(dir.join("passphrase"), passphrase).unwrap();
        script(
            &askpass,
            &format!("#!/bin/sh\ncat '{}'\n", dir.join("passphrase").display()),
        );
        testkit::process::stdout_of(
            Command::new("ssh-add")
                .arg(key)
                .env("SSH_AUTH_SOCK", &self.socket)
                .env("SSH_ASKPASS", &askpass)
                .env("SSH_ASKPASS_REQUIRE", "force")
                .env("DISPLAY", ":0")
                .stdin(Stdio::null()),
        );
    }
}

#[test]
fn a_key_with_a_passphrase_works_through_an_agent_and_is_refused_before_any_boot_without() {
    let test = "a_key_with_a_passphrase";
    let Some(setup) = Setup::new(test) else {
        return;
    };
    let Setup { rescue, api, .. } = &setup;
    // The operator's key, protected by a passphrase (ssh-keygen -N), registered in IAM.
    let key = rescue.path("protected_key");
    let made = Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "correct horse",
            "-C",
            "op",
            "-f",
        ])
        .arg(&key)
        .status()
        .unwrap();
    assert!(made.success());
    let public_key = fs::read_to_string(rescue.path("protected_key.pub")).unwrap();
    let id = api.seed_id(json!({"kind": "ssh_key", "name": "edgepop-edge-par-op",
                             "public_key": public_key.trim()}));
    let inventory = api.inventory_with_keys("{}", &[&id]);

    // No agent: refused before the server is touched, naming the way out.
    let out = setup.flash_as(&key, None, &inventory, &[]);
    failed(
        &out,
        &[
            "protected by a passphrase",
            "SSH_AUTH_SOCK is not set",
            "ssh-add",
            "nothing was done",
        ],
    );
    assert!(api.mutations().is_empty());
    // An agent that does not hold it: the same.
    let agent = Agent::start(rescue.dir.path());
    let out = setup.flash_as(&key, Some(&agent.socket), &inventory, &[]);
    failed(&out, &["does not hold it"]);
    assert!(api.mutations().is_empty());

    // The key loaded into the agent: the rescue system is logged into through it.
    agent.add(rescue.dir.path(), &key, "correct horse");
    let out = setup.flash_as(&key, Some(&agent.socket), &inventory, &[]);
    setup.flashed(&out);
    assert!(
        stderr(&out).contains("with the ssh-agent's identity"),
        "{}",
        stderr(&out)
    );
    assert_eq!(api.mutations(), FLASHED);
}

#[test]
fn without_a_key_given_by_id_the_rescue_system_is_never_asked_for() {
    let test = "without_a_key_given_by_id";
    let Some(setup) = Setup::new(test) else {
        return;
    };
    let Setup { api, .. } = &setup;
    setup.write_disk(b"before");
    let out = setup.flash(&api.inventory_with_keys("{}", &[]), &[]);
    failed(
        &out,
        &["edge-worker-1", "no SSH key id for the rescue system"],
    );
    assert!(api.mutations().is_empty());

    // Another key's id: the rescue system gets that key, not ours, and refuses us.
    let other = api.seed_id(json!({"kind": "ssh_key", "name": "someone-else",
                                "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZ3qQ0Xc8sMVvWQ5F0h7W0z0wLZc1V4m0cQ2yqU2c2c"}));
    let out = setup.flash(&api.inventory_with_keys("{}", &[&other]), &[]);
    failed(&out, &["edge-worker-1", "refused"]);
    assert_eq!(api.mutations(), ["POST stop", "POST start rescue"]);
    assert_eq!(setup.disk(), b"before");
    // Our key now: the rescue system left there refuses it, so the server is booted into rescue
    // again, with our key.
    let out = setup.flash_fresh(&[]);
    testkit::process::success_stdout(&out);
    assert!(
        stderr(&out).contains("booting it into rescue again"),
        "{}",
        stderr(&out)
    );
    assert_eq!(api.mutations()[2..], FLASHED.map(str::to_owned));
}

#[test]
fn a_server_without_our_cluster_and_role_tags_is_left_alone() {
    let test = "a_server_without_our_tags";
    let tags = ["edgepop-cluster=edge-ams", "edgepop-role=worker"];
    let Some(setup) = Setup::tagged(test, &tags) else {
        return;
    };
    let Setup { api, .. } = &setup;
    setup.write_disk(b"before");
    let out = setup.flash_fresh(&[]);
    failed(
        &out,
        &[
            "edge-worker-1",
            "lacks the tags edgepop-cluster=edge-par",
            "nothing was done to it",
        ],
    );
    assert!(api.mutations().is_empty());
    setup.tag_proven_refused();
    assert!(api.mutations().is_empty());
    assert_eq!(setup.disk(), b"before");
}

#[test]
fn a_server_of_another_project_is_left_alone_whatever_its_tags() {
    let test = "a_server_of_another_project";
    let Some(setup) = Setup::new(test) else {
        return;
    };
    let Setup { api, .. } = &setup;
    // Another project the same API key reads holds a server with our cluster's very tags, and
    // the inventory names it.
    let other = "44444444-4444-4444-8444-444444444444";
    api.point_at(api.seed_worker(&OURS, &[("project", other)]));
    setup.write_disk(b"before");
    let out = setup.flash_fresh(&[]);
    failed(
        &out,
        &[
            "edge-worker-1",
            &format!("belongs to the project {other}"),
            "not ours",
        ],
    );
    let stderr = setup.tag_proven_refused();
    assert!(stderr.contains("not ours"), "{stderr}");
    assert!(api.mutations().is_empty());
    assert_eq!(api.server()["tags"], json!(OURS));
    assert_eq!(setup.disk(), b"before");
}

/// Without the tag (here on a second server of ours, untagged), the inventory says the node is
/// live: a config applied over the recorded image `old`, or a proof on it that came a run late
/// (found configured and ours, no config recorded). Nothing is done to it either way.
fn assert_the_inventory_alone_says_it_is_live(setup: &Setup, old: &str) {
    let api = &setup.api;
    let tagged = api.point_at(api.seed_worker(&OURS, &[]));
    for proof in [
        r#""config_applied": "sha256:11""#.to_owned(),
        format!(r#""proved_ours": "{old}""#),
    ] {
        let live = api.inventory(&format!(r#"{{"image_flashed": "{old}", {proof}}}"#));
        let out = setup.flash(&live, &[]);
        assert_eq!(out.status.code(), Some(1), "{proof}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("runs sha256:0000"),
            "{proof}: {}",
            stderr(&out)
        );
        let kept: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(kept["nodes"][1]["steps"]["image_flashed"], old);
        assert!(api.mutations().is_empty(), "{proof}");
        assert_eq!(setup.disk(), b"the running node");
    }
    api.point_at(tagged);
}

#[test]
fn a_version_bump_on_a_configured_worker_writes_nothing_unless_a_reflash_is_asked() {
    let test = "a_version_bump_on_a_configured_worker";
    let Some((old, setup)) = Setup::flashed_before(test) else {
        return;
    };
    let Setup { api, raw, .. } = &setup;
    let tags = api.server()["tags"].clone();
    let installer = "factory.talos.dev/metal-installer/b4f8:v1.13.12";
    setup.write_disk(b"the running node");
    let out = setup.flash_fresh(&["--installer-image", installer]);
    failed(
        &out,
        &[
            "edge-worker-1",
            &format!("runs {old} (configured)"),
            &format!(
                "talosctl --talosconfig talos/_out/talosconfig --endpoints 192.0.2.11 --nodes 127.0.0.1 upgrade --image {installer}"
            ),
            "--reflash",
            "nothing was done",
        ],
    );
    assert!(api.mutations().is_empty());
    assert_eq!(setup.disk(), b"the running node");
    assert_the_inventory_alone_says_it_is_live(&setup, &old);
    let applied = api.inventory(&format!(
        r#"{{"image_flashed": "{old}", "config_applied": "sha256:11"}}"#
    ));

    // Asked, but with no key the rescue system would take: refused before anything changes, the
    // tag of the running image included.
    let keyless = api.inventory_with_keys(
        &format!(r#"{{"image_flashed": "{old}", "config_applied": "sha256:11"}}"#),
        &[],
    );
    let out = setup.flash(&keyless, &["--reflash"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    for needle in ["no SSH key id for the rescue system", "nothing was done"] {
        assert!(stderr(&out).contains(needle), "{}", stderr(&out));
    }
    assert!(api.mutations().is_empty());
    assert_eq!(api.server()["tags"], tags);

    // Asked explicitly: the tag goes first, then the node is wiped and flashed; its config is
    // forgotten (it is in maintenance mode again).
    let out = setup.flash(&applied, &["--reflash"]);
    let stdout = testkit::process::success_stdout(&out);
    assert!(stderr(&out).contains("--reflash: writing"));
    assert_eq!(setup.disk_sha256(), sha256(raw));
    let mut expected = vec!["PATCH server".to_owned()];
    expected.extend(FLASHED.iter().map(|m| (*m).to_owned()));
    assert_eq!(api.mutations(), expected);
    assert_eq!(
        api.server()["tags"],
        tags_with(&format!("edgepop-image-written=sha256:{}", sha256(raw)))
    );
    let written: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        written["nodes"][1]["steps"],
        json!({"image_flashed": format!("sha256:{}", sha256(raw))})
    );
}

#[test]
fn a_worker_upgraded_in_place_is_recorded_and_then_neither_refused_nor_written() {
    let test = "a_worker_upgraded_in_place";
    let Some((old, setup)) = Setup::flashed_before(test) else {
        return;
    };
    let Setup { api, raw, .. } = &setup;
    let installer = "factory.talos.dev/metal-installer/b4f8:v1.13.12";
    let upgraded = format!("edgepop-image-upgraded={installer}");
    setup.write_disk(b"the upgraded node");
    let live = api.inventory(&format!(
        r#"{{"image_flashed": "{old}", "config_applied": "sha256:11"}}"#
    ));

    // Once the worker answers with the installer's version, make upgrade-talos records it: the
    // upgraded tag in place of the flashed one (the disk no longer runs that image), written
    // once; the inventory goes through as it came.
    for _ in 0..2 {
        let out = setup.flash(&live, &["--tag-upgraded", installer]);
        let stdout = testkit::process::success_stdout(&out);
        let kept: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(kept, serde_json::from_str::<Value>(&live).unwrap());
        assert_eq!(api.mutations(), ["PATCH server"]);
        assert_eq!(api.server()["tags"], tags_with(&upgraded));
    }

    // apply-infra with the bumped pin, whose image has that installer: the worker runs it
    // already. Recorded as such, its config kept; no rescue boot, nothing written.
    let out = setup.flash(&live, &["--installer-image", installer]);
    let stdout = testkit::process::success_stdout(&out);
    assert!(
        stderr(&out).contains("upgraded in place with"),
        "{}",
        stderr(&out)
    );
    assert_eq!(api.mutations(), ["PATCH server"]);
    assert_eq!(setup.disk(), b"the upgraded node");
    let written: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        written["nodes"][1]["steps"],
        json!({"image_flashed": format!("sha256:{}", sha256(raw)), "config_applied": "sha256:11"})
    );

    // The next bump, another installer: the upgraded tag alone (a fresh inventory) says the
    // node is live; refused, the way to upgrade it said.
    let next = "factory.talos.dev/metal-installer/b4f8:v1.13.13";
    let out = setup.flash_fresh(&["--installer-image", next]);
    failed(
        &out,
        &[
            &format!("runs the Talos of {installer} (configured)"),
            "make upgrade-talos",
            &format!("--tag-upgraded {next}"),
            "nothing was done",
        ],
    );
    assert_eq!(api.mutations(), ["PATCH server"]);
    assert_eq!(setup.disk(), b"the upgraded node");
}

#[test]
fn a_disk_written_by_a_run_stopped_before_it_kept_its_inventory_is_not_written_again() {
    let test = "a_disk_written_by_a_run_stopped";
    let Some(setup) = Setup::new(test) else {
        return;
    };
    let Setup { api, raw, .. } = &setup;
    let digest = format!("sha256:{}", sha256(raw));
    let written = format!("edgepop-image-written={digest}");
    let mut tags = OURS.to_vec();
    tags.push(written.as_str());
    // What a run killed right after the written tag leaves: the server still in rescue, the
    // tag on it, no inventory kept.
    api.point_at(api.seed_worker(&tags, &[("boot_type", "rescue")]));
    setup.write_disk(b"written before");
    let out = setup.flash_fresh(&[]);
    let stdout = testkit::process::success_stdout(&out);
    assert!(
        stderr(&out).contains("not written again"),
        "{}",
        stderr(&out)
    );
    assert_eq!(setup.disk(), b"written before");
    // Only booted normally; recorded, so the proof step takes it from there.
    assert_eq!(api.mutations(), ["POST stop", "POST start normal"]);
    let inventory: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(inventory["nodes"][1]["steps"]["image_flashed"], digest);
    assert_eq!(api.server()["tags"], json!(tags));
    assert_eq!(api.server()["boot_type"], "normal");

    // Booted normally already (stopped after its normal start): nothing to do at all.
    let again = setup.flash_fresh(&[]);
    assert_eq!(testkit::process::success_stdout(&again), stdout);
    assert_eq!(api.mutations(), ["POST stop", "POST start normal"]);

    // Never proved ours (someone else configured it first): --reflash writes it again.
    let out = setup.flash_fresh(&["--reflash"]);
    setup.flashed(&out);
    let mut expected = vec!["POST stop".to_owned(), "POST start normal".to_owned()];
    expected.push("PATCH server".to_owned());
    expected.extend(FLASHED.iter().map(|m| (*m).to_owned()));
    assert_eq!(api.mutations(), expected);
    assert_eq!(api.server()["tags"], json!(tags));
}

#[test]
fn the_written_tag_of_another_image_goes_before_the_disk_is_written() {
    let test = "the_written_tag_of_another_image";
    let old = format!("edgepop-image-written=sha256:{}", "0".repeat(64));
    let mut tags = OURS.to_vec();
    tags.push(old.as_str());
    let Some(setup) = Setup::tagged(test, &tags) else {
        return;
    };
    let Setup { api, raw, .. } = &setup;
    // Not proved ours with that image: not a live node, written over without --reflash; its
    // tag goes first, so that no tag names an image the disk may no longer hold.
    let out = setup.flash_fresh(&[]);
    setup.flashed(&out);
    let mut expected = vec!["PATCH server".to_owned()];
    expected.extend(FLASHED.iter().map(|m| (*m).to_owned()));
    assert_eq!(api.mutations(), expected);
    let first_patch = api
        .requests()
        .into_iter()
        .find(|r| r["method"] == "PATCH")
        .unwrap();
    assert_eq!(first_patch["body"]["tags"], json!(OURS));
    assert_eq!(
        api.server()["tags"],
        tags_with(&format!("edgepop-image-written=sha256:{}", sha256(raw)))
    );
}

#[test]
fn the_rescue_system_downloads_the_image_over_https_and_checks_it_before_the_disk() {
    let test = "the_rescue_system_downloads_the_image";
    for tool in ["zstd", "curl"] {
        if Command::new(tool).arg("--version").output().is_err() {
            testkit::skip_or_fail(test, &format!("{tool} (the rescue side of --image-url)"));
            return;
        }
    }
    let Some(setup) = Setup::new(test) else {
        return;
    };
    let Setup { rescue, image, .. } = &setup;
    let release = Server::start(vec![Reply::ok(fs::read(image).unwrap())]).unwrap();
    // A presigned URL: its query string is a credential, never shown.
    let url = format!(
        "{}/metal-amd64.raw.zst?X-Amz-Signature=0123secret",
        release.url
    );
    let out = setup.flash_fresh(&["--image-url", &url]);
    setup.flashed(&out);
    let stderr_text = stderr(&out);
    assert!(
        stderr_text.contains(&format!(
            "the rescue system downloads {}/metal-amd64.raw.zst\n",
            release.url
        )),
        "{stderr_text}"
    );
    assert!(!stderr_text.contains("0123secret"), "{stderr_text}");
    assert_eq!(release.requests().len(), 1);
    // The URL reached curl on its standard input: not on a command line of the rescue system.
    let sudo = fs::read_to_string(rescue.path("sudo.log")).unwrap();
    assert!(!sudo.contains("http"), "{sudo}");

    // The Image Factory answers an asset with a 302 to its CDN (siderolabs/image-factory
    // internal/frontend/http/image.go): the download follows it.
    let cdn = Server::start_for(|url| {
        vec![
            Reply::Redirect {
                status: 302,
                location: format!("{url}/cdn/metal-amd64.raw.zst"),
            },
            Reply::ok(fs::read(image).unwrap()),
        ]
    })
    .unwrap();
    setup.next_case();
    let url = format!("{}/image/abc/v1.13.9/metal-amd64.raw.zst", cdn.url);
    let out = setup.flash_fresh(&["--image-url", &url]);
    setup.flashed(&out);
    let targets: Vec<String> = cdn.requests().into_iter().map(|r| r.target).collect();
    assert_eq!(
        targets,
        [
            "/image/abc/v1.13.9/metal-amd64.raw.zst",
            "/cdn/metal-amd64.raw.zst"
        ]
    );

    // A download that is not the pinned file is refused before anything touches the disk.
    let other = zstd::encode_all(&b"not the image"[..], 3).unwrap();
    let release = Server::start(vec![Reply::ok(other)]).unwrap();
    let url = format!("{}/metal-amd64.raw.zst", release.url);
    setup.next_case();
    let out = setup.flash_fresh(&["--image-url", &url]);
    failed(&out, &["refused before the disk was touched"]);
    assert_eq!(setup.disk(), b"before");
    let leftovers: Vec<String> = fs::read_dir("/tmp")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("edgepop-talos."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn the_compressed_image_is_expanded_by_the_rescue_system_when_it_has_zstd_else_here() {
    let test = "the_compressed_image_is_expanded_by_the_rescue_system";
    let Some(zstd) = testkit::process::which("zstd") else {
        testkit::skip_or_fail(test, "zstd (the rescue side's decompression)");
        return;
    };
    let Some(setup) = Setup::new(test) else {
        return;
    };
    let Setup {
        rescue, api, raw, ..
    } = &setup;
    let compressed = fs::metadata(&setup.image).unwrap().len();
    // The rescue system's zstd, recording how it is called.
    let calls = rescue.path("zstd-calls");
    let recording_zstd = format!(
        "#!/bin/sh\necho \"$*\" >>{}\nexec {} \"$@\"\n",
        calls.display(),
        zstd.display()
    );
    script(&rescue.path("bin/zstd"), &recording_zstd);
    let out = setup.flash_fresh(&[]);
    let stderr_text = stderr(&out);
    testkit::process::success_stdout(&out);
    assert_eq!(setup.disk_sha256(), sha256(raw));
    assert!(
        stderr_text.contains(&format!(
            "sending the compressed image ({compressed} bytes for {} raw); the rescue system decompresses it",
            raw.len()
        )),
        "{stderr_text}"
    );
    assert_eq!(fs::read_to_string(&calls).unwrap(), "--version\n-dc\n");

    // `--decompress-on local`: the raw image crosses; the rescue side's zstd is not asked.
    fs::remove_file(&calls).unwrap();
    setup.next_case();
    let out = setup.flash_fresh(&["--decompress-on", "local"]);
    testkit::process::success_stdout(&out);
    assert_eq!(setup.disk_sha256(), sha256(raw));
    assert!(stderr(&out).contains("decompressing here"));
    assert!(!calls.exists());

    // An image that does not compress: `auto` sends it raw, without asking the rescue side.
    let noise = testkit::incompressible_bytes(3 << 20, 9);
    let noise_image = rescue.path("noise.raw.zst");
    fs::write(&noise_image, zstd::encode_all(noise.as_slice(), 3).unwrap()).unwrap();
    let out = setup.flash_on(setup.sshd.port, &noise_image, &api.inventory("{}"), &[]);
    testkit::process::success_stdout(&out);
    assert_eq!(setup.disk_sha256(), sha256(&noise));
    assert!(
        stderr(&out).contains("too little saved to send it compressed"),
        "{}",
        stderr(&out)
    );
    assert!(!calls.exists());

    // A rescue system without zstd (the shell answers 127 for a missing command): `auto`
    // decompresses here instead; `rescue` stops before writing anything.
    script(
        &rescue.path("bin/zstd"),
        "#!/bin/sh\necho 'zstd: command not found' >&2\nexit 127\n",
    );
    setup.next_case();
    let out = setup.flash_fresh(&[]);
    testkit::process::success_stdout(&out);
    assert_eq!(setup.disk_sha256(), sha256(raw));
    let stderr_text = stderr(&out);
    assert!(
        stderr_text.contains("the rescue system has no zstd"),
        "{stderr_text}"
    );
    assert!(stderr_text.contains("decompressing here"), "{stderr_text}");

    setup.next_case();
    let out = setup.flash_fresh(&["--decompress-on", "rescue"]);
    failed(
        &out,
        &[
            "edge-worker-1",
            "--decompress-on rescue: the rescue system has no zstd",
            "nothing was written",
        ],
    );
    assert_eq!(setup.disk(), b"before");
}

#[test]
fn a_wrong_too_small_or_mounted_disk_is_refused_and_nothing_is_written() {
    let test = "a_wrong_too_small_or_mounted_disk_is_refused";
    let Some(setup) = Setup::new(test) else {
        return;
    };
    let Setup {
        rescue, api, raw, ..
    } = &setup;
    let other = json!({"name": "/dev/nvme0n1", "size": 480103981056u64, "type": "disk", "mountpoints": [null]});
    let cases = [
        (
            json!([other.clone()]),
            vec!["not found", "a disk that would do: /dev/nvme0n1 (480.1 GB)"],
        ),
        (
            json!([rescue.disk_device(raw.len() as u64 - 1, &[]), other.clone()]),
            vec!["the image needs", "would do: /dev/nvme0n1"],
        ),
        (
            json!([rescue.disk_device(1 << 30, &["/mnt"]), other]),
            vec!["mounted filesystems", "1 on /mnt", "would do: /dev/nvme0n1"],
        ),
    ];
    for (n, (devices, needles)) in cases.into_iter().enumerate() {
        rescue.lsblk(devices);
        setup.write_disk(b"before");
        let before = api.mutations().len();
        let out = setup.flash_fresh(&[]);
        let mut all = needles.clone();
        all.extend(["edge-worker-1", "refused:", "nothing was written"]);
        failed(&out, &all);
        assert_eq!(setup.disk(), b"before");
        // Left in rescue for a look, no normal boot; the next run uses that rescue system.
        let booted: &[&str] = if n == 0 {
            &["POST stop", "POST start rescue"]
        } else {
            &[]
        };
        assert_eq!(api.mutations()[before..], *booted);
    }
}

#[test]
fn each_worker_is_written_onto_its_own_disk_and_one_without_a_disk_is_left_alone() {
    let test = "each_worker_is_written_onto_its_own_disk";
    let Some(setup) = Setup::new(test) else {
        return;
    };
    let Setup {
        rescue, api, raw, ..
    } = &setup;
    // Two disks in the rescue system, edge-worker-1's and edge-worker-2's.
    let (disk_a, disk_b) = (rescue.disk(), rescue.disk().with_file_name("disk-b.img"));
    fs::write(&disk_a, b"before").unwrap();
    fs::write(&disk_b, b"before").unwrap();
    let other = json!({"name": disk_b, "size": 16 << 20, "type": "disk", "mountpoints": [null]});
    rescue.lsblk(json!([rescue.disk_device(16 << 20, &[]), other]));
    let (first, second) = (api.server_id(), api.seed_worker(&OURS, &[]));
    let worker = |name: &str, id: &str, disk: Option<&Path>| {
        let mut node = json!({"name": name, "role": "worker", "kind": "elastic-metal",
                              "zone": "fr-par-1", "id": id, "public_ipv4": "127.0.0.1",
                              "public_ipv6": null, "private_ipv4": null, "steps": {}});
        if let Some(disk) = disk {
            node["install_disk"] = json!(disk);
        }
        node
    };
    let inventory = |nodes: Vec<Value>| {
        json!({"kind": "NodeInventory", "version": 2, "cluster_name": "edge-par",
               "cluster_endpoint": "https://api.example.com:6443", "ssh_key_ids": [api.key],
               "nodes": nodes})
        .to_string()
    };
    // No --disk: each is written onto the disk its inventory records, and only that one.
    let both = inventory(vec![
        worker("edge-worker-2", &second, Some(&disk_b)),
        worker("edge-worker-1", &first, Some(&disk_a)),
    ]);
    let out = setup.flash(&both, &[]);
    let stdout = testkit::process::success_stdout(&out);
    assert_eq!(sha256(&fs::read(&disk_a).unwrap()), sha256(raw));
    assert_eq!(sha256(&fs::read(&disk_b).unwrap()), sha256(raw));
    let said = stderr(&out);
    for (name, disk) in [("edge-worker-1", &disk_a), ("edge-worker-2", &disk_b)] {
        assert!(
            said.contains(&format!("{name}: {} verified", disk.display())),
            "{said}"
        );
    }
    let written: Value = serde_json::from_str(&stdout).unwrap();
    let digest = format!("sha256:{}", sha256(raw));
    assert!(
        written["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["steps"]["image_flashed"] == digest.as_str())
    );

    // A node with neither its own disk nor --disk fails, named, before anything is done to it
    // (beside one flashed already, which needs none).
    api.fresh_server();
    let before = api.mutations().len();
    let mut done = worker("edge-worker-1", &first, Some(&disk_a));
    done["steps"] = json!({"image_flashed": digest});
    let third = worker("edge-worker-3", &api.server_id(), None);
    let out = setup.flash(&inventory(vec![done, third]), &[]);
    failed(
        &out,
        &[
            "edge-worker-3",
            "no disk to write",
            "--disk",
            "nothing was done",
        ],
    );
    assert_eq!(api.mutations().len(), before);
}

#[test]
fn a_connection_cut_mid_write_fails_and_a_rerun_completes() {
    let test = "a_connection_cut_mid_write";
    let Some(setup) = Setup::new(test) else {
        return;
    };
    let Setup { rescue, api, .. } = &setup;
    // The first dd takes 1 MiB, then kills the SSH session it runs in (its nearest sshd
    // ancestor: dd may sit behind the rescue side's zstd, bash and sudo): the connection drops
    // mid-stream, as when the rescue system or the network goes away.
    script(
        &rescue.path("bin/dd"),
        &format!(
            "#!/bin/sh\nif [ ! -e {dir}/cut ]; then\n  touch {dir}/cut; head -c 1048576 >/dev/null\n  p=$PPID\n  while [ \"$p\" -gt 1 ]; do\n    case \"$(cat /proc/$p/comm)\" in sshd*) kill -9 \"$p\"; exit 1;; esac\n    p=$(cut -d' ' -f4 /proc/$p/stat)\n  done\n  exit 1\nfi\nexec /bin/dd \"$@\"\n",
            dir = rescue.dir.path().display()
        ),
    );
    let out = setup.flash_fresh(&[]);
    let stderr_text = failed(&out, &["edge-worker-1", "the connection was lost after"]);
    assert!(
        !stderr_text.contains("after all"),
        "cut after the stream, not in it: {stderr_text}"
    );
    assert_eq!(api.mutations(), ["POST stop", "POST start rescue"]);

    // The rerun finds the server still in rescue and uses it: no second stop and rescue boot.
    let out = setup.flash_fresh(&[]);
    setup.flashed(&out);
    assert!(
        stderr(&out).contains("already in rescue"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        api.mutations()[2..],
        ["PATCH server", "POST stop", "POST start normal"]
    );
}

#[test]
fn a_start_answered_502_after_it_took_effect_is_not_sent_again() {
    let test = "a_start_answered_502";
    let Some(setup) = Setup::new(test) else {
        return;
    };
    let Setup { api, .. } = &setup;
    // Each start is done, then answered 502 (a gateway that gave up while the API acted): the
    // server is found starting in the boot asked for, and the start is not repeated.
    api.control(
        "faults",
        Some(
            json!([{"method": "POST", "path": "/start$", "kind": "status", "status": 502,
                     "applied": true, "count": 2}]),
        ),
    );
    let out = setup.flash_fresh(&[]);
    setup.flashed(&out);
    let answered_502 = api
        .requests()
        .iter()
        .filter(|r| r["fault_status"] == 502)
        .count();
    assert_eq!(answered_502, 2, "both faults were met");
    assert_eq!(api.mutations(), FLASHED.map(str::to_owned));
}

#[test]
fn a_rescue_that_never_answers_ssh_times_out_naming_the_server() {
    let test = "a_rescue_that_never_answers";
    let Some(setup) = Setup::new(test) else {
        return;
    };
    let Setup { api, .. } = &setup;
    // A port where nothing listens: the rescue system never comes.
    let closed = free_port();
    let out = setup.flash_on(closed, &setup.image, &api.inventory("{}"), &[]);
    failed(
        &out,
        &[
            "server edge-worker-1",
            "never answered SSH on 127.0.0.1",
            "after 20 tries",
            &format!(
                "scw baremetal server start {} boot-type=rescue",
                api.server_id()
            ),
        ],
    );
    assert_eq!(api.mutations(), ["POST stop", "POST start rescue"]);
}

#[test]
fn bad_input_is_refused_before_any_call() {
    let dir = tempfile::tempdir().unwrap();
    let api = Server::start(vec![]).unwrap();
    let missing = dir.path().join("missing.raw.zst");
    let inventory = r#"{"kind":"NodeInventory","version":2,"cluster_name":"edge-par","cluster_endpoint":"https://api.example.com:6443","ssh_key_ids":[],"nodes":[{"name":"w","role":"worker","kind":"elastic-metal","zone":"fr-par-1","id":"22222222-2222-4222-8222-222222222222","public_ipv4":"127.0.0.1","public_ipv6":null,"private_ipv4":null,"steps":{}}]}"#;
    let run = |stdin: &str| {
        testkit::process::run_with_stdin(
            Command::new(env!("CARGO_BIN_EXE_scw-rescue-flash"))
                .arg("--image")
                .arg(&missing)
                .env("SCW_ACCESS_KEY", "SCWXXXXXXXXXXXXXXXXX")
                .env("SCW_SECRET_KEY", SECRET)
                .env("SCW_DEFAULT_PROJECT_ID", PROJECT)
                .env("SCW_CONFIG_PATH", dir.path().join("no-scw-config.yaml"))
                .env("SCW_API_URL", &api.url),
            stdin.as_bytes(),
        )
    };
    testkit::process::assert_refused(&run(inventory), 2, &["missing.raw.zst", "cannot open"]);
    testkit::process::assert_refused(&run("{\"kind\":\"NodeInventory\"}"), 2, &["<stdin>"]);
    let version_one = inventory.replace(r#""version":2"#, r#""version":1"#);
    testkit::process::assert_refused(&run(&version_one), 2, &["unsupported version 1"]);
    let path_in_id = inventory.replace(
        "22222222-2222-4222-8222-222222222222",
        "22222222-2222-4222-8222-222222222222/reboot",
    );
    testkit::process::assert_refused(&run(&path_in_id), 2, &["nodes[0].id", "Scaleway id"]);
    assert!(api.requests().is_empty());
}
