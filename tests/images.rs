//! The edge's two images, end to end, with no container engine: `oci-image` builds them
//! (twice, to prove the digests reproducible), pushes them to a REAL registry (Debian's
//! `docker-registry`, the CNCF distribution server, on loopback), and `skopeo` (an independent
//! client) reads them back: the manifest digest is the record's, the filter layer holds the
//! built module byte for byte, the lists image's config says what was intended, and the lists
//! image's entrypoint, extracted from its layer, runs. Istio's digest check on the WasmPlugin
//! (pkg/wasm/imagefetcher.go `PrepareFetch`: the manifest's digest against `sha256`) is replayed
//! on what render-edge renders from the record.
//!
//! The etcd-backup image likewise: built twice to one digest, published (the record pins it for
//! render-platform) and read back by skopeo, where etcd-backup runs talosctl (the pinned build
//! beside it) by its bare name from the image's PATH.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

use pop_common::records::PublishedImages;
use serde_json::Value;
use testkit::workspace;

const MUSL: &str = "x86_64-unknown-linux-musl";

/// The target directory this test was built in (CARGO_TARGET_DIR honoured).
fn target_dir() -> PathBuf {
    // <target>/<profile>/deps/<test>-<hash>
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).unwrap().to_path_buf()
}

fn run(command: &mut Command) -> Output {
    let out = command.env_remove("EDGEPOP_LOG").output().unwrap();
    assert!(
        out.status.success(),
        "{command:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(command: &mut Command) -> String {
    String::from_utf8(run(command).stdout).unwrap()
}

fn sha256_hex(path: &Path) -> String {
    let text = stdout(Command::new("sha256sum").arg(path));
    text.split_whitespace().next().unwrap().to_string()
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// The registry and the independent reader every test of a published image needs.
const REGISTRY_AND_SKOPEO: [(&str, &str); 2] = [
    (
        "docker-registry",
        "docker-registry (apt-get install docker-registry)",
    ),
    ("skopeo", "skopeo (apt-get install skopeo)"),
];

/// Whether each of `programs` (a program and how to install it) is here; the first missing one
/// is reported.
fn have_all(test: &str, programs: &[(&str, &str)]) -> bool {
    match programs.iter().find(|(program, _)| !have(program)) {
        Some((_, why)) => {
            testkit::skip_or_fail(test, why);
            false
        }
        None => true,
    }
}

/// Everything the tests need, or `None` after reporting what is missing.
fn prerequisites(test: &str) -> Option<PathBuf> {
    let musl = ("musl-gcc", "musl-gcc (apt-get install musl-tools)");
    if !have_all(test, &REGISTRY_AND_SKOPEO) || !have_all(test, &[musl]) {
        return None;
    }
    let wasm = target_dir().join("wasm32-wasip1/wasm-release/pow_filter.wasm");
    if !wasm.is_file() {
        testkit::skip_or_fail(
            test,
            &format!("the filter module {} (make filter)", wasm.display()),
        );
        return None;
    }
    musl_bin_dir(test)?;
    Some(wasm)
}

/// The lists binaries and etcd-backup for musl, built once (dev profile: the release build is
/// `make lists-image`'s and `make backup-image`'s; the images' shape does not depend on the
/// profile).
fn musl_bin_dir(test: &str) -> Option<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let out = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "--target", MUSL])
            .args([
                "-p",
                "lists-refresh",
                "-p",
                "lists-gen-asn",
                "-p",
                "lists-gen-tor",
                "-p",
                "lists-gen-crawlers",
                "-p",
                "etcd-backup",
            ])
            .env("CC_x86_64_unknown_linux_musl", "musl-gcc")
            // Without debug info: a fifth of the size, and the image has no use for it.
            .env("CARGO_PROFILE_DEV_DEBUG", "false")
            .env("CARGO_TARGET_DIR", target_dir())
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(target_dir().join(MUSL).join("debug"))
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    });
    match built {
        Ok(dir) => Some(dir.clone()),
        Err(err) if err.contains("target may not be installed") => {
            testkit::skip_or_fail(test, "the Rust target x86_64-unknown-linux-musl");
            None
        }
        Err(err) => panic!("building the musl binaries failed:\n{err}"),
    }
}

fn oci_image() -> Command {
    let mut command = Command::new(workspace::bin("oci-image"));
    command.env_remove("SOURCE_DATE_EPOCH");
    command
}

/// Builds both layouts under `dir`; returns their printed digests.
fn build_both(wasm: &Path, bins: &Path, dir: &Path) -> (String, String) {
    let filter = stdout(
        oci_image()
            .args(["filter", "--wasm"])
            .arg(wasm)
            .arg("--out")
            .arg(dir.join("pow-filter")),
    );
    let lists = stdout(
        oci_image()
            .args(["lists", "--bin-dir"])
            .arg(bins)
            .args(["--ca-bundle"])
            .arg(ca_bundle())
            .arg("--out")
            .arg(dir.join("lists-refresh")),
    );
    (filter.trim().to_string(), lists.trim().to_string())
}

/// A CA bundle: the system's when there is one, else a one-certificate file.
fn ca_bundle() -> PathBuf {
    let system = PathBuf::from("/etc/ssl/certs/ca-certificates.crt");
    if system.is_file() {
        return system;
    }
    let path = std::env::temp_dir().join("edgepop-images-test-ca.pem");
    std::fs::write(
        &path,
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    path
}

/// Every file under `dir`, with its bytes, by relative path.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    testkit::files_under(dir)
        .iter()
        .map(|path| {
            let bytes = std::fs::read(path).unwrap();
            (path.strip_prefix(dir).unwrap().to_path_buf(), bytes)
        })
        .collect()
}

/// Debian's docker-registry on a free loopback port, with its own storage; stopped on drop.
struct Registry {
    child: Child,
    host: String,
    _dir: tempfile::TempDir,
}

impl Registry {
    fn start() -> Registry {
        Registry::start_with_auth(None)
    }

    /// With `htpasswd` (a bcrypt entry), the registry asks for HTTP Basic credentials.
    fn start_with_auth(htpasswd: Option<&str>) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let auth = match htpasswd {
            Some(entry) => {
                let file = dir.path().join("htpasswd");
                std::fs::write(&file, format!("{entry}\n")).unwrap();
                format!(
                    "auth:\n  htpasswd:\n    realm: edgepop-test\n    path: {}\n",
                    file.display()
                )
            }
            None => String::new(),
        };
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let host = format!("127.0.0.1:{port}");
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: {host}\n{auth}",
                dir.path().join("storage").display()
            ),
        )
        .unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut registry = Registry {
            child,
            host,
            _dir: dir,
        };
        // Bounded wait until it answers the API's base endpoint (GET /v2/ -> 200).
        for _ in 0..200 {
            if let Some(status) = registry.child.try_wait().unwrap() {
                panic!("docker-registry exited: {status}");
            }
            let ok = Command::new("skopeo")
                .args(["inspect", "--raw", "--tls-verify=false"])
                .arg(format!("docker://{}/probe/none:none", registry.host))
                .output()
                .unwrap();
            // A running registry answers "manifest unknown" (or "unauthorized"); a closed port,
            // "connection refused".
            let text = String::from_utf8_lossy(&ok.stderr);
            if !text.contains("connection refused") {
                return registry;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("docker-registry did not start on {}", registry.host);
    }

    fn skopeo_raw(&self, reference: &str) -> Vec<u8> {
        run(Command::new("skopeo")
            .args(["inspect", "--raw", "--tls-verify=false"])
            .arg(format!("docker://{reference}")))
        .stdout
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Copies an image out of the registry with skopeo (`dir:` layout: blobs named by hex digest)
/// and unpacks its only layer with tar into `into`.
fn unpack(reference: &str, work: &Path, into: &Path) -> Value {
    std::fs::create_dir_all(work).unwrap();
    let copy = work.join("copy");
    run(Command::new("skopeo")
        .args(["copy", "--quiet", "--src-tls-verify=false"])
        .arg(format!("docker://{reference}"))
        .arg(format!("dir:{}", copy.display())));
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(copy.join("manifest.json")).unwrap()).unwrap();
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{manifest}");
    assert_eq!(
        layers[0]["mediaType"],
        "application/vnd.oci.image.layer.v1.tar+gzip"
    );
    let blob = layers[0]["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:");
    std::fs::create_dir_all(into).unwrap();
    run(Command::new("tar")
        .arg("-xzf")
        .arg(copy.join(blob))
        .arg("-C")
        .arg(into));
    manifest
}

#[test]
fn both_images_build_to_the_same_digests_in_two_directories() {
    let Some(wasm) = prerequisites("both_images_build_to_the_same_digests_in_two_directories")
    else {
        return;
    };
    let bins = musl_bin_dir("").unwrap();
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let first = build_both(&wasm, &bins, a.path());
    let second = build_both(&wasm, &bins, b.path());
    assert!(first.0.starts_with("sha256:") && first.1.starts_with("sha256:"));
    assert_eq!(first, second);
    assert_eq!(
        tree(&a.path().join("pow-filter")),
        tree(&b.path().join("pow-filter"))
    );
    assert_eq!(
        tree(&a.path().join("lists-refresh")),
        tree(&b.path().join("lists-refresh"))
    );
    // The digest is the content's: another mtime is another image.
    let out = run(oci_image()
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .args(["filter", "--wasm"])
        .arg(&wasm)
        .arg("--out")
        .arg(a.path().join("later")));
    assert_ne!(String::from_utf8(out.stdout).unwrap().trim(), first.0);
}

#[test]
fn published_images_read_back_by_skopeo_are_what_the_record_pins_and_istio_would_accept() {
    let test =
        "published_images_read_back_by_skopeo_are_what_the_record_pins_and_istio_would_accept";
    let Some(wasm) = prerequisites(test) else {
        return;
    };
    let bins = musl_bin_dir(test).unwrap();
    let work = tempfile::tempdir().unwrap();
    let (filter_digest, lists_digest) = build_both(&wasm, &bins, work.path());
    let registry = Registry::start();

    // The edge config names the registry; the record goes where images.published says.
    std::fs::create_dir(work.path().join("cfg")).unwrap();
    let config = work.path().join("cfg/edge.json");
    let namespace = format!("{}/edgepop", registry.host);
    std::fs::write(
        &config,
        serde_json::json!({
            "pow_enabled": true,
            "pow": {},
            // In a directory that does not exist yet, as talos/_out on a fresh checkout.
            "images": {"registry": namespace, "published": "../out/published-images.json"},
        })
        .to_string(),
    )
    .unwrap();
    let publish = || {
        stdout(
            oci_image()
                .args(["publish", "--edge-config"])
                .arg(&config)
                .arg("--filter")
                .arg(work.path().join("pow-filter"))
                .arg("--lists")
                .arg(work.path().join("lists-refresh"))
                .arg("--record")
                .arg(work.path().join("out/published-images.json")),
        )
    };
    let text = publish();
    assert_eq!(
        std::fs::read_to_string(work.path().join("out/published-images.json")).unwrap(),
        text
    );
    let record: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(record["kind"], "PublishedImages");
    assert_eq!(record["registry"], namespace.as_str());
    assert_eq!(record["filter"]["digest"], filter_digest.as_str());
    assert_eq!(record["lists_refresh"]["digest"], lists_digest.as_str());
    // Without --backup there is no backup image to pin: the field is left out, not invented.
    assert!(record.get("etcd_backup").is_none(), "{record}");
    // Publishing again pushes nothing new and records the same thing.
    assert_eq!(publish(), text);

    let images = Published {
        registry: &registry,
        namespace: &namespace,
        filter_digest: &filter_digest,
        lists_digest: &lists_digest,
        work: work.path(),
    };
    images.assert_skopeo_reads_what_the_record_pins();
    images.assert_the_filter_layer_is_the_module(&wasm);
    images.assert_the_lists_image_is_static_non_root_and_runs(test, &bins);
    images.assert_istio_accepts_what_render_edge_pins(&config, &wasm);
}

/// The two images as published to the test's registry: where, and the digests the record pins.
struct Published<'a> {
    registry: &'a Registry,
    namespace: &'a str,
    filter_digest: &'a str,
    lists_digest: &'a str,
    work: &'a Path,
}

impl Published<'_> {
    /// The filter image by the digest the record pins.
    fn filter_reference(&self) -> String {
        format!("{}/pow-filter@{}", self.namespace, self.filter_digest)
    }

    /// The lists image by the digest the record pins.
    fn lists_reference(&self) -> String {
        format!("{}/lists-refresh@{}", self.namespace, self.lists_digest)
    }

    /// skopeo's view: the manifest stored under the digest and under the tag hashes to it.
    fn assert_skopeo_reads_what_the_record_pins(&self) {
        let Published {
            registry,
            namespace,
            filter_digest,
            lists_digest,
            work,
        } = *self;
        for (name, digest) in [
            ("pow-filter", &filter_digest),
            ("lists-refresh", &lists_digest),
        ] {
            let by_digest = registry.skopeo_raw(&format!("{namespace}/{name}@{digest}"));
            let by_tag =
                registry.skopeo_raw(&format!("{namespace}/{name}:{}", env!("CARGO_PKG_VERSION")));
            assert_eq!(by_digest, by_tag);
            let file = work.join(format!("{name}.manifest"));
            std::fs::write(&file, &by_digest).unwrap();
            assert_eq!(format!("sha256:{}", sha256_hex(&file)), *digest);
        }
    }

    /// The filter layer holds plugin.wasm, byte for byte the module that was built.
    fn assert_the_filter_layer_is_the_module(&self, wasm: &Path) {
        let work = self.work;
        let filter_root = work.join("filter-root");
        unpack(&self.filter_reference(), &work.join("f"), &filter_root);
        assert_eq!(
            std::fs::read(filter_root.join("plugin.wasm")).unwrap(),
            std::fs::read(wasm).unwrap()
        );
    }

    /// The lists image's config: non-root user, the entrypoint, no shell anywhere; its binaries
    /// are those built, the entrypoint runs (static: no loader needed) and a generator makes a
    /// list from a capture.
    fn assert_the_lists_image_is_static_non_root_and_runs(&self, test: &str, bins: &Path) {
        let work = self.work;
        let config_json: Value = serde_json::from_slice(
            &run(Command::new("skopeo")
                .args(["inspect", "--config", "--tls-verify=false"])
                .arg(format!("docker://{}", self.lists_reference())))
            .stdout,
        )
        .unwrap();
        assert_eq!(config_json["config"]["User"], "65532:65532");
        assert_eq!(
            config_json["config"]["Entrypoint"],
            serde_json::json!(["/usr/local/bin/lists-refresh"])
        );
        assert_eq!(config_json["os"], "linux");
        let lists_root = work.join("lists-root");
        unpack(&self.lists_reference(), &work.join("l"), &lists_root);
        assert!(!lists_root.join("bin/sh").exists() && !lists_root.join("bin").exists());
        assert!(
            lists_root
                .join("etc/ssl/certs/ca-certificates.crt")
                .is_file()
        );
        for name in [
            "lists-refresh",
            "lists-gen-asn",
            "lists-gen-tor",
            "lists-gen-crawlers",
        ] {
            assert_eq!(
                std::fs::read(lists_root.join("usr/local/bin").join(name)).unwrap(),
                std::fs::read(bins.join(name)).unwrap(),
                "{name}"
            );
        }

        // The entrypoint runs (static: no loader needed) and a generator makes a list from a capture.
        let entry = lists_root.join("usr/local/bin/lists-refresh");
        let help = stdout(Command::new(&entry).arg("--help"));
        assert!(help.contains("--sources"), "{help}");
        if let Some(shared) = workspace::shared_dir(test) {
            let capture = shared.join("fixtures/tor/torbulkexitlist_2023-10-14.txt");
            let list = stdout(
                Command::new(lists_root.join("usr/local/bin/lists-gen-tor"))
                    .args(["-o", "text"])
                    .arg(&capture),
            );
            let lines = list.lines().count();
            assert!(lines > 100, "{lines} addresses from {}", capture.display());
            assert!(
                list.lines()
                    .all(|l| l.parse::<std::net::IpAddr>().is_ok() || l.contains('/')),
                "{list}"
            );
        }
    }

    /// render-edge from that record; then Istio's check: the manifest's digest, fetched back,
    /// must equal the WasmPlugin's sha256. The .wasm file's own hash would fail it.
    fn assert_istio_accepts_what_render_edge_pins(&self, config: &Path, wasm: &Path) {
        let out = run(Command::new(workspace::bin("render-edge"))
            .arg("--inputs")
            .arg(workspace::root().join("config/platform-inputs.example.json"))
            .arg("--config")
            .arg(config)
            .args(["-o", "json"]));
        let list: Value = serde_json::from_slice(&out.stdout).unwrap();
        let items = list["items"].as_array().unwrap();
        let plugin = items.iter().find(|i| i["kind"] == "WasmPlugin").unwrap();
        let url = plugin["spec"]["url"].as_str().unwrap();
        let sha256 = plugin["spec"]["sha256"].as_str().unwrap();
        let reference = url.strip_prefix("oci://").unwrap();
        assert_eq!(reference, self.filter_reference());
        let fetched = self.work.join("fetched.manifest");
        std::fs::write(&fetched, self.registry.skopeo_raw(reference)).unwrap();
        let actual = sha256_hex(&fetched);
        assert_eq!(actual, sha256, "Istio would refuse the module");
        assert_ne!(
            actual,
            sha256_hex(wasm),
            "the .wasm hash must not pass for the manifest digest"
        );
        let cron = items.iter().find(|i| i["kind"] == "CronJob").unwrap();
        assert_eq!(
            cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"],
            self.lists_reference()
        );
    }
}

#[test]
fn publish_refuses_a_record_path_render_edge_would_not_read_before_pushing_anything() {
    let (work, config) = testkit::temp_file(
        "edge.json",
        r#"{"images": {"registry": "127.0.0.1:9/edgepop", "published": "published-images.json"}}"#,
    );
    let out = oci_image()
        .args(["publish", "--edge-config"])
        .arg(&config)
        .args(["--filter", "absent", "--lists", "absent", "--record"])
        .arg(work.path().join("elsewhere.json"))
        .env_remove("EDGEPOP_LOG")
        .output()
        .unwrap();
    testkit::process::assert_refused(&out, 2, &["images.published", "elsewhere.json"]);
    assert!(!work.path().join("elsewhere.json").exists());
}

/// `edgepop:edgepop-test-password`, bcrypt cost 4 (what the registry's htpasswd auth reads).
const HTPASSWD: &str = "edgepop:$2b$04$fU/G1mD59QGW8sN8E7VpTetHGMu8PS48M9nmWsGL/XBZVWgJi1d2O";

#[test]
fn a_registry_that_wants_credentials_gets_them_from_the_environment_or_a_private_auth_file() {
    let test =
        "a_registry_that_wants_credentials_gets_them_from_the_environment_or_a_private_auth_file";
    if !have_all(test, &REGISTRY_AND_SKOPEO) {
        return;
    }
    let registry = Registry::start_with_auth(Some(HTPASSWD));
    let work = tempfile::tempdir().unwrap();
    let namespace = format!("{}/edgepop", registry.host);
    // Two small images: the auth is what is tested here, not the content.
    testkit::oci_image::tiny_layouts(oci_image, work.path(), &namespace);
    let publish = |env: &[(&str, &str)]| testkit::oci_image::publish(oci_image(), work.path(), env);

    let out = publish(&[]);
    testkit::process::assert_refused(
        &out,
        1,
        &["asks for credentials", "EDGEPOP_REGISTRY_USERNAME"],
    );
    let out = publish(&[
        ("EDGEPOP_REGISTRY_USERNAME", "edgepop"),
        ("EDGEPOP_REGISTRY_PASSWORD", "not-it"),
    ]);
    testkit::process::assert_refused(&out, 1, &["refused the credentials"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("not-it"));

    let out = publish(&[
        ("EDGEPOP_REGISTRY_USERNAME", "edgepop"),
        ("EDGEPOP_REGISTRY_PASSWORD", "edgepop-test-password"),
    ]);
    let record: Value = serde_json::from_str(&testkit::process::success_stdout(&out)).unwrap();
    assert_a_private_auth_file_publishes_the_same(&registry.host, work.path(), &publish, &record);
    assert_skopeo_with_the_credentials_finds_the_pinned_manifest(&namespace, work.path(), &record);
}

/// `oci-image publish` with these variables in its environment (and no other credentials).
type Publish<'a> = dyn Fn(&[(&str, &str)]) -> std::process::Output + 'a;

/// The docker-style auth file: refused while others can read it, used once it is 0600, where it
/// records what the environment's credentials recorded.
fn assert_a_private_auth_file_publishes_the_same(
    host: &str,
    work: &Path,
    publish: &Publish<'_>,
    record: &Value,
) {
    let auth = work.join("auth.json");
    // base64("edgepop:edgepop-test-password")
    std::fs::write(
        &auth,
        serde_json::json!({"auths": {host: {"auth": "ZWRnZXBvcDplZGdlcG9wLXRlc3QtcGFzc3dvcmQ="}}})
            .to_string(),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&auth, std::fs::Permissions::from_mode(0o644)).unwrap();
    let auth_env = [("EDGEPOP_REGISTRY_AUTH_FILE", auth.to_str().unwrap())];
    testkit::process::assert_refused(&publish(&auth_env), 2, &["chmod 600"]);
    std::fs::set_permissions(&auth, std::fs::Permissions::from_mode(0o600)).unwrap();
    let again: Value =
        serde_json::from_str(&testkit::process::success_stdout(&publish(&auth_env))).unwrap();
    assert_eq!(&again, record);
}

/// skopeo, with the same credentials, finds the manifest the record pins.
fn assert_skopeo_with_the_credentials_finds_the_pinned_manifest(
    namespace: &str,
    work: &Path,
    record: &Value,
) {
    let digest = record["filter"]["digest"].as_str().unwrap();
    let raw = run(Command::new("skopeo")
        .args([
            "inspect",
            "--raw",
            "--tls-verify=false",
            "--creds",
            "edgepop:edgepop-test-password",
        ])
        .arg(format!("docker://{namespace}/pow-filter@{digest}")))
    .stdout;
    let file = work.join("m.json");
    std::fs::write(&file, raw).unwrap();
    assert_eq!(format!("sha256:{}", sha256_hex(&file)), digest);
}

// --- the etcd-backup image ---------------------------------------------------------------------

/// What the backup image is built from: etcd-backup built for musl here, and talosctl and age
/// as pipelines/upstream.sh built them at their pins.
struct BackupInputs {
    bins: PathBuf,
    talosctl: PathBuf,
    age: PathBuf,
}

impl BackupInputs {
    /// All of them, or `None` after reporting what is missing.
    fn get(test: &str) -> Option<BackupInputs> {
        if !have("musl-gcc") {
            testkit::skip_or_fail(test, "musl-gcc (apt-get install musl-tools)");
            return None;
        }
        let talosctl = testkit::upstream::program(test, "talosctl")?;
        let age = testkit::upstream::program(test, "age")?;
        let bins = musl_bin_dir(test)?;
        Some(BackupInputs {
            bins,
            talosctl,
            age,
        })
    }

    /// `oci-image backup` into `out`; the digest it prints.
    fn build(&self, out: &Path) -> String {
        let digest = stdout(
            oci_image()
                .args(["backup", "--bin-dir"])
                .arg(&self.bins)
                .arg("--talosctl")
                .arg(&self.talosctl)
                .arg("--age")
                .arg(&self.age)
                .arg("--ca-bundle")
                .arg(ca_bundle())
                .arg("--out")
                .arg(out),
        );
        digest.trim().to_string()
    }
}

#[test]
fn the_backup_image_builds_to_the_same_digest_in_two_directories() {
    let Some(inputs) =
        BackupInputs::get("the_backup_image_builds_to_the_same_digest_in_two_directories")
    else {
        return;
    };
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let first = inputs.build(&a.path().join("etcd-backup"));
    let second = inputs.build(&b.path().join("etcd-backup"));
    assert!(first.starts_with("sha256:"), "{first}");
    assert_eq!(first, second);
    assert_eq!(
        tree(&a.path().join("etcd-backup")),
        tree(&b.path().join("etcd-backup"))
    );
}

#[test]
fn the_backup_image_published_and_read_back_by_skopeo_runs_etcd_backup_with_its_programs() {
    let test =
        "the_backup_image_published_and_read_back_by_skopeo_runs_etcd_backup_with_its_programs";
    if !have_all(test, &REGISTRY_AND_SKOPEO) {
        return;
    }
    let Some(inputs) = BackupInputs::get(test) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let layout = work.path().join("etcd-backup");
    let digest = inputs.build(&layout);
    let registry = Registry::start();
    let namespace = format!("{}/edgepop", registry.host);
    // Tiny filter and lists layouts beside it: the backup image is what is tested here.
    testkit::oci_image::tiny_layouts(oci_image, work.path(), &namespace);
    let text = stdout(
        oci_image()
            .current_dir(work.path())
            .args(["publish", "--edge-config", "edge.json"])
            .args(["--filter", "f", "--lists", "l", "--backup"])
            .arg(&layout),
    );
    // The record as render-platform reads it: the backup pinned by the digest that was built.
    let record: PublishedImages = serde_json::from_str(&text).unwrap();
    let backup = record.etcd_backup.expect("no etcd_backup in the record");
    assert_eq!(backup.repository, format!("{namespace}/etcd-backup"));
    assert_eq!(backup.digest.as_str(), digest);
    let reference = backup.pinned();

    let by_digest = registry.skopeo_raw(&reference);
    let by_tag = registry.skopeo_raw(&format!("{}:{}", backup.repository, backup.tag));
    assert_eq!(by_digest, by_tag);
    let file = work.path().join("etcd-backup.manifest");
    std::fs::write(&file, &by_digest).unwrap();
    assert_eq!(format!("sha256:{}", sha256_hex(&file)), digest);
    assert_the_backup_config_runs_etcd_backup_as_nonroot(&reference);

    let root = work.path().join("backup-root");
    unpack(&reference, &work.path().join("b"), &root);
    assert!(!root.join("bin").exists(), "no shell, no /bin");
    assert!(root.join("etc/ssl/certs/ca-certificates.crt").is_file());
    for (name, built) in [
        ("etcd-backup", inputs.bins.join("etcd-backup")),
        ("talosctl", inputs.talosctl.clone()),
        ("age", inputs.age.clone()),
    ] {
        assert_eq!(
            std::fs::read(root.join("usr/local/bin").join(name)).unwrap(),
            std::fs::read(&built).unwrap(),
            "{name}"
        );
    }
    assert_the_backup_programs_run(&root.join("usr/local/bin"), work.path());
}

/// skopeo's view of the image's config: etcd-backup as the entrypoint, run as 65532, with
/// /usr/local/bin on PATH (etcd-backup runs talosctl and age by their bare names).
fn assert_the_backup_config_runs_etcd_backup_as_nonroot(reference: &str) {
    let config: Value = serde_json::from_slice(
        &run(Command::new("skopeo")
            .args(["inspect", "--config", "--tls-verify=false"])
            .arg(format!("docker://{reference}")))
        .stdout,
    )
    .unwrap();
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/usr/local/bin/etcd-backup"])
    );
    let env = config["config"]["Env"].as_array().unwrap();
    assert!(env.contains(&"PATH=/usr/local/bin".into()), "{config}");
}

/// From the unpacked image, with nothing of this machine's environment: talosctl and age say
/// their pins, and etcd-backup, with PATH as the image sets it (here: the unpacked folder),
/// finds talosctl and runs it. talosctl stops at its missing talosconfig, before any network.
fn assert_the_backup_programs_run(bin: &Path, work: &Path) {
    let said = stdout(
        Command::new(bin.join("talosctl"))
            .env_clear()
            .args(["version", "--client"]),
    );
    assert!(said.contains(&testkit::pin("TALOSCTL_VERSION")), "{said}");
    let said = stdout(Command::new(bin.join("age")).env_clear().arg("--version"));
    assert_eq!(said.trim(), testkit::pin("AGE_VERSION"));

    let out = Command::new(bin.join("etcd-backup"))
        .env_clear()
        .env("PATH", bin)
        .envs([
            ("SCW_ACCESS_KEY", "SCWXXXXXXXXXXXXXXXXX"),
            ("SCW_SECRET_KEY", "11111111-1111-1111-1111-111111111111"),
            (
                "SCW_DEFAULT_PROJECT_ID",
                "11111111-1111-1111-1111-111111111111",
            ),
            ("SCW_S3_ENDPOINT", "http://127.0.0.1:9"),
        ])
        .args(["--cluster", "edge-par", "--bucket", "edgepop-test"])
        .args(["--region", "fr-par", "--node", "127.0.0.1"])
        .args([
            "--age-recipient",
            "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p",
        ])
        .arg("--talosconfig")
        .arg(work.join("no-talosconfig"))
        .arg("--work-dir")
        .arg(work)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("talosctl: error constructing client") && !stderr.contains("cannot run"),
        "{stderr}"
    );
}

/// A talosctl built with cgo (dynamic: it names a loader the image does not have) is refused by
/// its path before anything is written. This test's own binary stands for it.
#[test]
fn the_backup_image_refuses_a_dynamic_talosctl_naming_it_and_writes_nothing() {
    let work = tempfile::tempdir().unwrap();
    // A 64-bit little-endian ELF header with no program header: static, as far as the check
    // reads it.
    let mut elf = vec![0u8; 64];
    elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
    for name in ["etcd-backup", "age"] {
        std::fs::write(work.path().join(name), &elf).unwrap();
    }
    let dynamic = std::env::current_exe().unwrap();
    let out = work.path().join("etcd-backup-image");
    let refused = oci_image()
        .args(["backup", "--bin-dir"])
        .arg(work.path())
        .arg("--talosctl")
        .arg(&dynamic)
        .arg("--age")
        .arg(work.path().join("age"))
        .arg("--ca-bundle")
        .arg(ca_bundle())
        .arg("--out")
        .arg(&out)
        .env_remove("EDGEPOP_LOG")
        .output()
        .unwrap();
    testkit::process::assert_refused(
        &refused,
        2,
        &[
            &dynamic.display().to_string(),
            "dynamically linked",
            "CGO_ENABLED=0",
        ],
    );
    assert!(!out.exists());
}
