//! scw-rescue-flash end to end, on loopback:
//! - the rescue system is a real OpenSSH server (Debian's openssh-server), started here on a free
//!   port with a throwaway host key and user key; its "disk" is a file, and `lsblk` on the
//!   session's PATH is a script printing what `lsblk --json -b -p` prints in Scaleway's rescue;
//! - the Elastic Metal API is testkit's scripted HTTP server; every request the tool sends is
//!   checked against the reboot schema of `../shared/scaleway-openapi/scaleway.baremetal.v1.Api.yml`
//!   and every reply uses only fields of its `Server` schema (contract: Elastic Metal API v1).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support {
    pub mod sshd;
}

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use support::sshd::{Rescue, Sshd, free_port, rescue, script};
use testkit::http::{Reply, Server};

const SERVER_ID: &str = "22222222-2222-4222-8222-222222222222";
const SECRET: &str = "33333333-3333-4333-8333-333333333333";

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

/// The server as the Elastic Metal API answers it (every call on a server answers the whole
/// object): the fields the client reads are all there, as in the recorded traffic.
fn server_json(status: &str, boot_type: &str, user: &str, tags: &[&str]) -> String {
    json!({"id": SERVER_ID, "name": "edge-worker-1", "status": status, "boot_type": boot_type,
           "project_id": "22222222-2222-4222-8222-222222222222",
           "offer_id": "33333333-3333-4333-8333-000000000001", "offer_name": "EM-A116X-SSD",
           "ips": [{"id": "44444444-4444-4444-8444-444444444444", "address": "127.0.0.1",
                    "version": "IPv4"}],
           "zone": "fr-par-1", "tags": tags, "rescue_server": {"user": user, "password": "x"}})
    .to_string()
}

fn inventory(steps: &str) -> String {
    format!(
        r#"{{"kind":"NodeInventory","version":1,"cluster_name":"edge-par","cluster_endpoint":"https://api.example.com:6443",
        "nodes":[{{"name":"edge-par-cp-1","role":"controlplane","kind":"instance","zone":"fr-par-1",
        "id":"11111111-1111-4111-8111-111111111111","public_ipv4":"127.0.0.1","public_ipv6":null,"private_ipv4":null,"steps":{{}}}},
        {{"name":"edge-worker-1","role":"worker","kind":"elastic-metal","zone":"fr-par-1",
        "id":"{SERVER_ID}","public_ipv4":"127.0.0.1","public_ipv6":null,"private_ipv4":null,"steps":{steps}}}]}}"#
    )
}

fn flash(
    rescue: &Rescue,
    port: u16,
    api: &Server,
    image: &Path,
    stdin: &str,
    extra: &[&str],
) -> Output {
    testkit::process::run_with_stdin(
        Command::new(env!("CARGO_BIN_EXE_scw-rescue-flash"))
            .arg("--image")
            .arg(image)
            .arg("--disk")
            .arg(rescue.disk())
            .arg("--ssh-key")
            .arg(rescue.path("user_key"))
            .args([
                "--ssh-port",
                &port.to_string(),
                "--no-sudo",
                "--timeout-seconds",
                "20",
            ])
            .args(["--ssh-tries", "3", "--ssh-interval-seconds", "0"])
            .args(extra)
            .env("SCW_ACCESS_KEY", "SCWXXXXXXXXXXXXXXXXX")
            .env("SCW_SECRET_KEY", SECRET)
            .env(
                "SCW_DEFAULT_PROJECT_ID",
                "22222222-2222-4222-8222-222222222222",
            )
            // No config file of the machine's: the environment alone.
            .env("SCW_CONFIG_PATH", rescue.path("no-scw-config.yaml"))
            .env("SCW_API_URL", &api.url),
        stdin.as_bytes(),
    )
}

/// The Elastic Metal API's reboot body and Server fields, from Scaleway's OpenAPI.
struct Contract {
    reboot_fields: Vec<String>,
    patch_fields: Vec<String>,
    boot_types: Vec<String>,
    server_fields: Vec<String>,
}

fn contract(test: &str) -> Option<Contract> {
    let shared = testkit::workspace::shared_dir(test)?;
    let text =
        fs::read_to_string(shared.join("scaleway-openapi/scaleway.baremetal.v1.Api.yml")).unwrap();
    let spec: Value = serde_norway::from_str(&text).unwrap();
    let reboot = &spec["paths"]["/baremetal/v1/zones/{zone}/servers/{server_id}/reboot"]["post"]["requestBody"]
        ["content"]["application/json"]["schema"]["properties"];
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    let patch = &spec["paths"]["/baremetal/v1/zones/{zone}/servers/{server_id}"]["patch"]["requestBody"]
        ["content"]["application/json"]["schema"]["properties"];
    Some(Contract {
        reboot_fields: keys(reboot),
        patch_fields: keys(patch),
        boot_types: reboot["boot_type"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect(),
        server_fields: keys(
            &spec["components"]["schemas"]["scaleway.baremetal.v1.Server"]["properties"],
        ),
    })
}

impl Contract {
    /// Every request: the server's path, the secret key header, and for a reboot or a patch a
    /// body made of the schema's fields only. Returns the boot types asked, in order, and the GET
    /// count; `tags` gets the tags each PATCH set.
    fn check_tags(
        &self,
        requests: &[testkit::http::Request],
        tags: &mut Vec<Value>,
    ) -> (Vec<String>, usize) {
        let server_path = format!("/baremetal/v1/zones/fr-par-1/servers/{SERVER_ID}");
        let mut boots = Vec::new();
        let mut gets = 0;
        for request in requests {
            assert_eq!(request.header("x-auth-token"), Some(SECRET));
            match request.method.as_str() {
                "POST" => {
                    assert_eq!(request.target, format!("{server_path}/reboot"));
                    let body: Value = serde_json::from_slice(&request.body).unwrap();
                    for key in body.as_object().unwrap().keys() {
                        assert!(
                            self.reboot_fields.contains(key),
                            "reboot field {key} not in the API"
                        );
                    }
                    let boot = body["boot_type"].as_str().unwrap().to_owned();
                    assert!(self.boot_types.contains(&boot), "{boot}");
                    boots.push(boot);
                }
                "GET" => {
                    assert_eq!(request.target, server_path);
                    gets += 1;
                }
                "PATCH" => {
                    assert_eq!(request.target, server_path);
                    let body: Value = serde_json::from_slice(&request.body).unwrap();
                    for key in body.as_object().unwrap().keys() {
                        assert!(
                            self.patch_fields.contains(key),
                            "update field {key} not in the API"
                        );
                    }
                    tags.push(body["tags"].clone());
                }
                other => panic!("unexpected {other} {}", request.target),
            }
        }
        (boots, gets)
    }

    fn check(&self, requests: &[testkit::http::Request]) -> (Vec<String>, usize) {
        self.check_tags(requests, &mut Vec::new())
    }

    fn reply(&self, status: &str, boot_type: &str, user: &str) -> Reply {
        self.reply_tagged(status, boot_type, user, &["edgepop-cluster=edge-par"])
    }

    fn reply_tagged(&self, status: &str, boot_type: &str, user: &str, tags: &[&str]) -> Reply {
        let body = server_json(status, boot_type, user, tags);
        let value: Value = serde_json::from_str(&body).unwrap();
        for key in value.as_object().unwrap().keys() {
            assert!(
                self.server_fields.contains(key),
                "Server field {key} not in the API"
            );
        }
        Reply::json(200, body)
    }

    /// the server as it is, reboot into rescue, one check while it resets, ready in rescue, the
    /// normal reboot, the tags.
    fn full_script(&self, user: &str) -> Vec<Reply> {
        vec![
            self.reply("ready", "normal", user),
            self.reply("resetting", "rescue", user),
            self.reply("resetting", "rescue", user),
            self.reply("ready", "rescue", user),
            self.reply("resetting", "normal", user),
            self.reply("resetting", "normal", user),
        ]
    }
}

/// What each flashing test starts from: the API contract, a rescue system listening with an
/// empty disk, and an image (with its raw bytes). `None` when a prerequisite is missing (skipped).
fn setup(test: &str) -> Option<(Contract, Rescue, Sshd, PathBuf, Vec<u8>)> {
    let contract = contract(test)?;
    let (rescue, sshd) = rescue(test)?;
    let (image, raw) = image(rescue.dir.path());
    Some((contract, rescue, sshd, image, raw))
}

/// One run of the tool on a one-worker inventory with no step done, against a fresh API stand-in
/// that answers the whole rescue-then-normal sequence.
fn flash_fresh(
    contract: &Contract,
    rescue: &Rescue,
    sshd: &Sshd,
    image: &Path,
    extra: &[&str],
) -> (Server, Output) {
    let api = Server::start(contract.full_script(&rescue.user)).unwrap();
    let out = flash(rescue, sshd.port, &api, image, &inventory("{}"), extra);
    (api, out)
}

fn sha256(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

#[test]
fn the_image_lands_on_the_disk_verified_then_a_rerun_is_a_no_op() {
    let test = "the_image_lands_on_the_disk_verified";
    let Some((contract, rescue, sshd, image, raw)) = setup(test) else {
        return;
    };
    rescue.lsblk(json!([rescue.disk_device(16 << 20, &[])]));
    let (api, out) = flash_fresh(&contract, &rescue, &sshd, &image, &[]);
    let stdout = testkit::process::success_stdout(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);

    // The bytes on the "disk" are the decompressed image's.
    let written = fs::read(rescue.disk()).unwrap();
    assert_eq!(written.len(), raw.len());
    assert_eq!(sha256(&written), sha256(&raw));
    let inventory_out: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        inventory_out["nodes"][1]["steps"]["image_flashed"],
        format!("sha256:{}", sha256(&raw))
    );
    assert!(
        inventory_out["nodes"][0]["steps"]
            .get("image_flashed")
            .is_none(),
        "instances are not flashed"
    );
    let mut tags = Vec::new();
    let (boots, gets) = contract.check_tags(&api.requests(), &mut tags);
    assert_eq!(boots, ["rescue", "normal"]);
    assert_eq!(gets, 3);
    // The digest is kept in the server's tags too, next to the tags it had.
    let tag = format!("edgepop-image-flashed=sha256:{}", sha256(&raw));
    assert_eq!(tags, [json!(["edgepop-cluster=edge-par", tag.clone()])]);
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

    // Re-run with the inventory it wrote: nothing asked of Scaleway, nothing written.
    let api_again = Server::start(vec![]).unwrap();
    fs::write(rescue.disk(), b"untouched").unwrap();
    let again = flash(&rescue, sshd.port, &api_again, &image, &stdout, &[]);
    assert_eq!(testkit::process::success_stdout(&again), stdout);
    assert!(api_again.requests().is_empty());
    assert_eq!(fs::read(rescue.disk()).unwrap(), b"untouched");

    // A fresh inventory (another machine): the server's tag says it is done; one GET, no reboot.
    let api_tagged = Server::start(vec![contract.reply_tagged(
        "ready",
        "normal",
        &rescue.user,
        &[&tag],
    )])
    .unwrap();
    let tagged = flash(
        &rescue,
        sshd.port,
        &api_tagged,
        &image,
        &inventory("{}"),
        &[],
    );
    assert_eq!(testkit::process::success_stdout(&tagged), stdout);
    assert_eq!(contract.check(&api_tagged.requests()), (vec![], 1));
    assert_eq!(fs::read(rescue.disk()).unwrap(), b"untouched");
}

#[test]
fn the_rescue_system_can_download_the_pinned_image_itself() {
    let test = "the_rescue_system_can_download";
    for tool in ["zstd", "curl"] {
        if Command::new(tool).arg("--version").output().is_err() {
            testkit::skip_or_fail(test, &format!("{tool} (the rescue side of --image-url)"));
            return;
        }
    }
    let Some((contract, rescue, sshd, image, raw)) = setup(test) else {
        return;
    };
    rescue.lsblk(json!([rescue.disk_device(16 << 20, &[])]));
    let release = Server::start(vec![Reply::ok(fs::read(&image).unwrap())]).unwrap();
    let url = format!("{}/metal-amd64.raw.zst", release.url);
    let (_api, out) = flash_fresh(&contract, &rescue, &sshd, &image, &["--image-url", &url]);
    let stdout = testkit::process::success_stdout(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("the rescue system downloads"));
    assert_eq!(release.requests().len(), 1);
    assert_eq!(sha256(&fs::read(rescue.disk()).unwrap()), sha256(&raw));
    let written: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        written["nodes"][1]["steps"]["image_flashed"],
        format!("sha256:{}", sha256(&raw))
    );

    // A download that is not the pinned file fails the read-back: not recorded, not rebooted.
    let other = zstd::encode_all(&b"not the image"[..], 3).unwrap();
    let release = Server::start(vec![Reply::ok(other)]).unwrap();
    let url = format!("{}/metal-amd64.raw.zst", release.url);
    let (api, out) = flash_fresh(&contract, &rescue, &sshd, &image, &["--image-url", &url]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is not the image's"), "{stderr}");
    assert_eq!(contract.check(&api.requests()).0, ["rescue"]);
}

#[test]
fn the_compressed_image_is_expanded_by_the_rescue_system_when_it_has_zstd_else_here() {
    let test = "the_compressed_image_is_expanded_by_the_rescue_system";
    let Some(zstd) = testkit::process::which("zstd") else {
        testkit::skip_or_fail(test, "zstd (the rescue side's decompression)");
        return;
    };
    let Some((contract, rescue, sshd, image, raw)) = setup(test) else {
        return;
    };
    rescue.lsblk(json!([rescue.disk_device(16 << 20, &[])]));
    let compressed = fs::metadata(&image).unwrap().len();
    // The rescue system's zstd, recording how it is called.
    let calls = rescue.path("zstd-calls");
    let recording_zstd = format!(
        "#!/bin/sh\necho \"$*\" >>{}\nexec {} \"$@\"\n",
        calls.display(),
        zstd.display()
    );
    script(&rescue.path("bin/zstd"), &recording_zstd);
    let (api, out) = flash_fresh(&contract, &rescue, &sshd, &image, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    testkit::process::success_stdout(&out);
    assert_eq!(sha256(&fs::read(rescue.disk()).unwrap()), sha256(&raw));
    assert!(
        stderr.contains(&format!(
            "sending the compressed image ({compressed} bytes for {} raw); the rescue system decompresses it",
            raw.len()
        )),
        "{stderr}"
    );
    assert_eq!(fs::read_to_string(&calls).unwrap(), "--version\n-dc\n");
    assert_eq!(contract.check(&api.requests()).0, ["rescue", "normal"]);

    // `--decompress-on local`: the raw image crosses; the rescue side's zstd is not asked.
    fs::remove_file(&calls).unwrap();
    fs::write(rescue.disk(), b"before").unwrap();
    let (_, out) = flash_fresh(
        &contract,
        &rescue,
        &sshd,
        &image,
        &["--decompress-on", "local"],
    );
    testkit::process::success_stdout(&out);
    assert_eq!(sha256(&fs::read(rescue.disk()).unwrap()), sha256(&raw));
    assert!(String::from_utf8_lossy(&out.stderr).contains("decompressing here"));
    assert!(!calls.exists());

    // An image that does not compress: `auto` sends it raw, without asking the rescue side.
    let noise = testkit::incompressible_bytes(3 << 20, 9);
    let noise_image = rescue.path("noise.raw.zst");
    fs::write(&noise_image, zstd::encode_all(noise.as_slice(), 3).unwrap()).unwrap();
    let (_, out) = flash_fresh(&contract, &rescue, &sshd, &noise_image, &[]);
    testkit::process::success_stdout(&out);
    assert_eq!(sha256(&fs::read(rescue.disk()).unwrap()), sha256(&noise));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("too little saved to send it compressed"),
        "{stderr}"
    );
    assert!(!calls.exists());

    // A rescue system without zstd (the shell answers 127 for a missing command): `auto`
    // decompresses here instead; `rescue` stops before writing anything.
    script(
        &rescue.path("bin/zstd"),
        "#!/bin/sh\necho 'zstd: command not found' >&2\nexit 127\n",
    );
    fs::write(rescue.disk(), b"before").unwrap();
    let (_, out) = flash_fresh(&contract, &rescue, &sshd, &image, &[]);
    testkit::process::success_stdout(&out);
    assert_eq!(sha256(&fs::read(rescue.disk()).unwrap()), sha256(&raw));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the rescue system has no zstd"), "{stderr}");
    assert!(stderr.contains("decompressing here"), "{stderr}");

    fs::write(rescue.disk(), b"before").unwrap();
    let (api, out) = flash_fresh(
        &contract,
        &rescue,
        &sshd,
        &image,
        &["--decompress-on", "rescue"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for needle in [
        "edge-worker-1",
        "--decompress-on rescue: the rescue system has no zstd",
        "nothing was written",
    ] {
        assert!(stderr.contains(needle), "`{needle}` not in {stderr}");
    }
    assert_eq!(fs::read(rescue.disk()).unwrap(), b"before");
    assert_eq!(contract.check(&api.requests()).0, ["rescue"]);
}

#[test]
fn a_wrong_too_small_or_mounted_disk_is_refused_and_nothing_is_written() {
    let test = "a_wrong_too_small_or_mounted_disk_is_refused";
    let Some((contract, rescue, sshd, image, raw)) = setup(test) else {
        return;
    };
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
    for (devices, needles) in cases {
        rescue.lsblk(devices);
        fs::write(rescue.disk(), b"before").unwrap();
        let (api, out) = flash_fresh(&contract, &rescue, &sshd, &image, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        for needle in needles
            .iter()
            .chain(&["edge-worker-1", "refused:", "nothing was written"])
        {
            assert!(stderr.contains(needle), "`{needle}` not in {stderr}");
        }
        assert_eq!(fs::read(rescue.disk()).unwrap(), b"before");
        let written: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(written["nodes"][1]["steps"].get("image_flashed").is_none());
        // Left in rescue for a look; no normal reboot.
        assert_eq!(contract.check(&api.requests()).0, ["rescue"]);
    }
}

#[test]
fn a_connection_cut_mid_write_fails_and_a_rerun_completes() {
    let test = "a_connection_cut_mid_write";
    let Some((contract, rescue, sshd, image, raw)) = setup(test) else {
        return;
    };
    rescue.lsblk(json!([rescue.disk_device(16 << 20, &[])]));
    // The first dd takes 1 MiB, then kills the SSH session it runs in (its nearest sshd
    // ancestor: dd may sit behind the rescue side's zstd and bash): the connection drops
    // mid-stream, as when the rescue system or the network goes away.
    script(
        &rescue.path("bin/dd"),
        &format!(
            "#!/bin/sh\nif [ ! -e {dir}/cut ]; then\n  touch {dir}/cut; head -c 1048576 >/dev/null\n  p=$PPID\n  while [ \"$p\" -gt 1 ]; do\n    case \"$(cat /proc/$p/comm)\" in sshd*) kill -9 \"$p\"; exit 1;; esac\n    p=$(cut -d' ' -f4 /proc/$p/stat)\n  done\n  exit 1\nfi\nexec /bin/dd \"$@\"\n",
            dir = rescue.dir.path().display()
        ),
    );
    let (api, out) = flash_fresh(&contract, &rescue, &sshd, &image, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("edge-worker-1"), "{stderr}");
    assert!(stderr.contains("the connection was lost after"), "{stderr}");
    assert!(
        !stderr.contains("after all"),
        "cut after the stream, not in it: {stderr}"
    );
    let first: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(first["nodes"][1]["steps"].get("image_flashed").is_none());
    assert_eq!(contract.check(&api.requests()).0, ["rescue"]);

    let (api, again) = flash_fresh(&contract, &rescue, &sshd, &image, &[]);
    let stdout = testkit::process::success_stdout(&again);
    assert_eq!(sha256(&fs::read(rescue.disk()).unwrap()), sha256(&raw));
    let written: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        written["nodes"][1]["steps"]["image_flashed"],
        format!("sha256:{}", sha256(&raw))
    );
    assert_eq!(contract.check(&api.requests()).0, ["rescue", "normal"]);
}

#[test]
fn a_rescue_that_never_answers_ssh_times_out_naming_the_server() {
    let test = "a_rescue_that_never_answers";
    let Some(contract) = contract(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (image, _) = image(dir.path());
    let key = dir.path().join("key");
    fs::write(&key, "unused").unwrap();
    let rescue = Rescue {
        dir,
        user: "rescue".into(),
    };
    let api = Server::start(vec![
        contract.reply("ready", "normal", "rescue"),
        contract.reply("resetting", "rescue", "rescue"),
        contract.reply("ready", "rescue", "rescue"),
    ])
    .unwrap();
    // A port where nothing listens: the rescue system never comes.
    let closed = free_port();
    let out = flash(&rescue, closed, &api, &image, &inventory("{}"), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for needle in [
        "server edge-worker-1",
        "never answered SSH on 127.0.0.1",
        "after 3 tries",
        &format!("scw baremetal server reboot {SERVER_ID} boot-type=rescue zone=fr-par-1"),
    ] {
        assert!(stderr.contains(needle), "`{needle}` not in {stderr}");
    }
    assert_eq!(contract.check(&api.requests()).0, ["rescue"]);
}

#[test]
fn bad_input_is_refused_before_any_call() {
    let dir = tempfile::tempdir().unwrap();
    let api = Server::start(vec![]).unwrap();
    let rescue = Rescue {
        dir,
        user: "rescue".into(),
    };
    let missing = rescue.path("missing.raw.zst");
    let out = flash(&rescue, 9, &api, &missing, &inventory("{}"), &[]);
    testkit::process::assert_refused(&out, 2, &["missing.raw.zst", "cannot open"]);
    let out = flash(
        &rescue,
        9,
        &api,
        &missing,
        "{\"kind\":\"NodeInventory\"}",
        &[],
    );
    testkit::process::assert_refused(&out, 2, &["<stdin>"]);
    assert!(api.requests().is_empty());
}
