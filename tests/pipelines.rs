//! The shell pipelines this crate backs: `pipelines/check-manifests.sh` (its validation half, on
//! hand-written objects, with the real manifest-check binary) and `pipelines/vendor.sh` (against a
//! loopback HTTP server serving the Gateway API files rebuilt from ../shared/crds).
#![allow(clippy::unwrap_used)] // a failed unwrap in a test helper is a test failure

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use testkit::process::text;

fn repo() -> PathBuf {
    testkit::workspace::root()
}

fn shared(test: &str, what: &str) -> Option<PathBuf> {
    let shared = match std::env::var_os("EDGEPOP_SHARED") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => repo().join("../shared"),
    };
    if shared.join(what).exists() {
        Some(shared)
    } else {
        testkit::skip_or_fail(test, &format!("{}", shared.join(what).display()));
        None
    }
}

// --- check-manifests.sh ------------------------------------------------------------------------

const GOOD: &str = "\
apiVersion: v1
kind: Namespace
metadata:
  name: edge
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: origin
  namespace: edge
spec:
  parentRefs:
  - name: edge-gateway
    sectionName: https-www
  rules:
  - backendRefs:
    - name: origin
      port: 8080
";

fn check_manifests(schemas: &Path, files: &[&Path]) -> Output {
    let bin = testkit::workspace::bin("manifest-check")
        .parent()
        .unwrap()
        .to_path_buf();
    Command::new("bash")
        .arg(repo().join("pipelines/check-manifests.sh"))
        .args(files)
        .env("SCHEMAS_DIR", schemas)
        .env("BIN", bin)
        .env("MANIFEST_VALIDATOR", "manifest-check")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn check_manifests_passes_valid_files_and_fails_invalid_ones() {
    let Some(shared) = shared(
        "check_manifests_passes_valid_files_and_fails_invalid_ones",
        "schemas",
    ) else {
        return;
    };
    let schemas = shared.join("schemas");
    let (dir, good) = testkit::temp_file("good.yaml", GOOD);
    let out = check_manifests(&schemas, &[&good]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("good.yaml: ok HTTPRoute edge/origin"),
        "{}",
        text(&out)
    );

    let bad = dir.path().join("bad.yaml");
    fs::write(
        &bad,
        GOOD.replace("port: 8080", "port: 8080\n      weight: heavy"),
    )
    .unwrap();
    let unknown = dir.path().join("unknown.yaml");
    fs::write(
        &unknown,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n",
    )
    .unwrap();
    let out = check_manifests(&schemas, &[&good, &bad, &unknown]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "bad.yaml: invalid HTTPRoute edge/origin: at /spec/rules/0/backendRefs/0/weight:"
        ),
        "{}",
        text(&out)
    );
    assert!(
        stdout.contains("unknown.yaml: invalid Widget w: no schema"),
        "{}",
        text(&out)
    );
}

#[test]
fn check_manifests_fails_without_the_schema_directory() {
    let (dir, good) = testkit::temp_file("good.yaml", GOOD);
    let out = check_manifests(&dir.path().join("no-schemas"), &[&good]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no-schemas does not exist"),
        "{}",
        text(&out)
    );
}

// --- vendor.sh ---------------------------------------------------------------------------------

/// The pins of k8s/versions.env: (file, sha256), in order.
fn pins() -> Vec<(String, String)> {
    let versions = fs::read_to_string(repo().join("k8s/versions.env")).unwrap();
    versions
        .lines()
        .filter(|l| l.starts_with("VENDOR_GATEWAY_API_"))
        .map(|l| {
            let (file, sha) = l.split_once('=').unwrap().1.split_once(':').unwrap();
            (file.to_string(), sha.to_string())
        })
        .collect()
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

/// Splits the shared bundle at its `---` / `#` / `# <path>` / `#` headers back into the upstream
/// files. PROVENANCE.md says each file's leading `---` line was dropped: each file is written with
/// and without it, and the one whose sha256 is the pin in UPSTREAM-FILES.tsv is kept.
pub(crate) fn rebuild_upstream_files(bundle: &Path, tsv: &Path, into: &Path) -> usize {
    let bundle = fs::read_to_string(bundle).unwrap();
    let tsv = fs::read_to_string(tsv).unwrap();
    let pinned = |path: &str| {
        tsv.lines()
            .find_map(|l| l.strip_prefix(path).and_then(|r| r.strip_prefix('\t')))
            .map(|r| r[..64].to_string())
            .unwrap()
    };
    let mut rebuilt = 0;
    // The header before the first file is comments only; every other section is one file.
    for section in bundle.split("\n---\n").skip(1) {
        let mut lines = section.splitn(4, '\n');
        let (open, path, close, body) = (
            lines.next().unwrap(),
            lines.next().unwrap(),
            lines.next().unwrap(),
            lines.next().unwrap(),
        );
        assert_eq!((open, close), ("#", "#"), "unexpected section header");
        let path = path.strip_prefix("# ").unwrap();
        let name = Path::new(path).file_name().unwrap();
        // split() ate the newline that ends every file but the last.
        let body = if body.ends_with('\n') {
            body.to_string()
        } else {
            format!("{body}\n")
        };
        let want = pinned(path);
        let target = into.join(name);
        let matched = [body.clone(), format!("---\n{body}")]
            .into_iter()
            .any(|candidate| {
                fs::write(&target, candidate).unwrap();
                sha256(&target) == want
            });
        assert!(
            matched,
            "{path}: neither form matches the pinned sha256 {want}"
        );
        rebuilt += 1;
    }
    rebuilt
}

/// `python3 -m http.server` on an ephemeral loopback port, killed (by its own handle) on drop.
pub(crate) struct Server {
    child: Child,
    pub(crate) url: String,
}

impl Server {
    pub(crate) fn start(dir: &Path) -> Option<Server> {
        let mut child = Command::new("python3")
            .args([
                "-u",
                "-m",
                "http.server",
                "0",
                "--bind",
                "127.0.0.1",
                "--directory",
            ])
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        // "Serving HTTP on 127.0.0.1 port 41234 (http://127.0.0.1:41234/) ...": the first line,
        // written once the socket listens. EOF (python died) ends the read.
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: Option<u16> = line
            .split_whitespace()
            .skip_while(|w| *w != "port")
            .nth(1)
            .and_then(|p| p.parse().ok());
        match port {
            Some(port) => Some(Server {
                child,
                url: format!("http://127.0.0.1:{port}"),
            }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                None
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// [`vendor`] fails (exit 1) saying `why`.
fn assert_vendor_fails(base_url: &str, vendor_dir: &Path, why: &str) {
    let out = vendor(base_url, vendor_dir);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(why),
        "{}",
        text(&out)
    );
}

fn vendor(base_url: &str, vendor_dir: &Path) -> Output {
    Command::new("bash")
        .arg(repo().join("pipelines/vendor.sh"))
        .env("VENDOR_BASE_URL", base_url)
        .env("VENDOR_DIR", vendor_dir)
        .env_remove("VERSIONS_FILE")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Every file under `dir`, relative, sorted, with its sha256.
fn listing(dir: &Path) -> Vec<(String, String)> {
    testkit::files_under(dir)
        .iter()
        .map(|path| {
            let rel = path.strip_prefix(dir).unwrap().display().to_string();
            (rel, sha256(path))
        })
        .collect()
}

#[test]
fn vendor_fetches_the_pins_and_refuses_a_tampered_file() {
    let test = "vendor_fetches_the_pins_and_refuses_a_tampered_file";
    let Some(shared) = shared(test, "crds/gateway-api-v1.4.0-standard.yaml") else {
        return;
    };
    let crds = shared.join("crds");
    let served = tempfile::tempdir().unwrap();
    let n = rebuild_upstream_files(
        &crds.join("gateway-api-v1.4.0-standard.yaml"),
        &crds.join("UPSTREAM-FILES.tsv"),
        served.path(),
    );
    let pins = pins();
    assert_eq!(
        n,
        pins.len(),
        "the shared bundle and the pins disagree on the file count"
    );
    for (file, sha) in &pins {
        assert_eq!(
            &sha256(&served.path().join(file)),
            sha,
            "{file}: versions.env pin differs from upstream"
        );
    }
    let Some(server) = Server::start(served.path()) else {
        testkit::skip_or_fail(test, "python3 (its http.server)");
        return;
    };

    // The pins pass: every file in place, byte for byte, and the bundle is the shared one.
    let good = tempfile::tempdir().unwrap();
    let out = vendor(&server.url, good.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let version_dir = good.path().join("gateway-api-v1.4.0");
    for (file, sha) in &pins {
        assert_eq!(&sha256(&version_dir.join(file)), sha, "{file}");
    }
    let bundle = fs::read_to_string(good.path().join("gateway-api-v1.4.0.yaml")).unwrap();
    let reference = fs::read_to_string(crds.join("gateway-api-v1.4.0-standard.yaml")).unwrap();
    let body = |s: &str| s[s.find("\n---\n").unwrap()..].to_string();
    assert!(
        body(&bundle) == body(&reference),
        "the vendored bundle differs from the shared one"
    );
    let before = listing(good.path());
    assert_eq!(before.len(), pins.len() + 1, "{before:?}");

    // One tampered byte: vendor fails, a fresh folder gets nothing, a vendored one stays as it was.
    let victim = served.path().join(&pins[2].0);
    let mut bytes = fs::read(&victim).unwrap();
    bytes.extend_from_slice(b"# tampered\n");
    fs::write(&victim, bytes).unwrap();
    let fresh = tempfile::tempdir().unwrap();
    assert_vendor_fails(&server.url, fresh.path(), "does not match the pin");
    assert_eq!(listing(fresh.path()), Vec::<(String, String)>::new());
    assert_eq!(
        fs::read_dir(fresh.path()).unwrap().count(),
        0,
        "a temporary folder was left behind"
    );
    let out = vendor(&server.url, good.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(listing(good.path()), before);
    assert_eq!(
        fs::read_dir(good.path()).unwrap().count(),
        2,
        "a temporary folder was left behind"
    );

    // A file the server does not have: a download error, the same guarantees.
    fs::remove_file(&victim).unwrap();
    assert_vendor_fails(&server.url, good.path(), "download failed");
    assert_eq!(listing(good.path()), before);
}

// --- the Makefile's calls ----------------------------------------------------------------------

/// Each `VAR=value ... pipelines/<script>.sh` of the Makefile's recipes (continuation lines
/// joined): (script, the variables set for it).
fn makefile_script_calls() -> Vec<(String, Vec<String>)> {
    let makefile = fs::read_to_string(repo().join("Makefile")).unwrap();
    let joined = makefile.replace("\\\n", " ");
    let mut calls = Vec::new();
    for line in joined.lines().filter(|l| l.starts_with('\t')) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(at) = words.iter().position(|w| w.starts_with("pipelines/")) else {
            continue;
        };
        let set = words[..at]
            .iter()
            .map(|w| w.trim_start_matches('@'))
            .filter_map(|w| w.split_once('=').map(|(name, _)| name))
            .filter(|name| {
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
            })
            .map(str::to_owned)
            .collect();
        calls.push((words[at].to_owned(), set));
    }
    calls
}

/// A variable the Makefile sets for a script that never reads it misleads whoever edits either:
/// each one must be read by the script (or a file it sources from pipelines/).
#[test]
fn every_variable_the_makefile_passes_to_a_script_is_read_by_it() {
    let calls = makefile_script_calls();
    assert!(
        calls
            .iter()
            .any(|(script, set)| script == "pipelines/apply-edge.sh" && !set.is_empty()),
        "the Makefile's calls were not found: {calls:?}"
    );
    for (script, set) in calls {
        let mut text = fs::read_to_string(repo().join(&script)).unwrap();
        let sourced: Vec<String> = text
            .lines()
            .filter_map(|l| {
                ["source \"$(dirname \"$0\")/", ". \"$(dirname \"$0\")/"]
                    .iter()
                    .find_map(|how| l.split_once(how).map(|(_, rest)| rest))
            })
            .filter_map(|rest| rest.split_once('"').map(|(file, _)| file.to_owned()))
            .collect();
        for file in sourced {
            text.push_str(&fs::read_to_string(repo().join("pipelines").join(file)).unwrap());
        }
        for name in set {
            assert!(
                text.contains(&format!("${name}")) || text.contains(&format!("${{{name}")),
                "the Makefile passes {name} to {script}, which never reads it"
            );
        }
    }
}

// --- setup.sh and CI ---------------------------------------------------------------------------

/// CI installs through pipelines/setup.sh, the one list of what the project installs: a package
/// named in .ci/run as well would drift from it.
#[test]
fn ci_installs_through_setup_sh_and_names_no_package_itself() {
    let ci = fs::read_to_string(repo().join(".ci/run")).unwrap();
    let commands: Vec<&str> = ci
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert!(
        commands.contains(&"pipelines/setup.sh test"),
        "{commands:#?}"
    );
    for installer in ["apt-get", "pip", "npm", "rustup"] {
        assert!(
            !commands
                .iter()
                .any(|c| c.split_whitespace().any(|w| w == installer)),
            ".ci/run calls {installer} itself: {commands:#?}"
        );
    }
    let setup = fs::read_to_string(repo().join("pipelines/setup.sh")).unwrap();
    for package in [
        "openssh-server",
        "docker-registry",
        "skopeo",
        "musl-tools",
        "qemu-utils",
    ] {
        assert!(
            setup.contains(package),
            "setup.sh does not install {package}"
        );
    }
}

/// The sections of `make help`, each title with its targets; the first real run, before them,
/// left out (tests/readme_walk.rs checks it).
fn help_sections(help: &str) -> Vec<(String, Vec<String>)> {
    let (_, listed) = help
        .split_once("\n\n")
        .expect("make help has no first-run lines before its sections");
    let mut sections: Vec<(String, Vec<String>)> = Vec::new();
    for line in listed.lines().filter(|l| !l.trim().is_empty()) {
        match line.strip_prefix("  ") {
            Some(target) => sections
                .last_mut()
                .unwrap()
                .1
                .push(target.split_whitespace().next().unwrap().to_owned()),
            None => sections.push((line.to_owned(), Vec::new())),
        }
    }
    sections
}

/// `make help` lists the targets, after the first real run, in the order a deployment meets
/// them: the three layers, then day to day, tear down, and the build, demo and tests; each
/// layer's targets under it.
#[test]
fn make_help_follows_the_layers() {
    let out = Command::new("make")
        .args(["--no-print-directory", "-C"])
        .arg(repo())
        .arg("help")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let help = String::from_utf8(out.stdout).unwrap();
    let sections = help_sections(&help);
    let expected: [(&str, &[&str]); 8] = [
        ("Start", &["help", "tools", "check", "apply"]),
        ("Layer 1, infra", &["apply-infra", "dry-run-infra"]),
        (
            "Layer 2, platform",
            &["vendor", "apply-platform", "diff-platform"],
        ),
        (
            "Layer 3, edge",
            &["apply-edge", "dry-run-edge", "diff-edge", "publish-images"],
        ),
        (
            "Day to day",
            &["up", "down", "cluster-status", "rotate-pow-secret"],
        ),
        (
            "Day 2",
            &[
                "etcd-snapshot",
                "dry-run-etcd-restore",
                "etcd-restore",
                "dry-run-etcd-remove-member",
                "etcd-remove-member",
                "dry-run-replace-control-plane",
                "replace-control-plane",
                "dry-run-upgrade-talos",
                "upgrade-talos",
                "dry-run-upgrade-k8s",
                "upgrade-k8s",
            ],
        ),
        (
            "Tear down",
            &[
                "destroy",
                "destroy-edge",
                "destroy-platform",
                "destroy-infra",
            ],
        ),
        (
            "Build, demo, tests",
            &["filter", "demo", "lists", "test", "lint", "bench"],
        ),
    ];
    assert_eq!(sections.len(), expected.len(), "{help}");
    for ((title, targets), (want_title, want_targets)) in sections.iter().zip(expected) {
        assert!(
            title.starts_with(want_title),
            "`{title}` where `{want_title}` was expected: {help}"
        );
        for target in want_targets {
            assert!(
                targets.iter().any(|t| t == target),
                "{target} not under `{title}`: {help}"
            );
        }
    }
}

/// `make lists FORCE=yes` publishes a list that shrank beyond the threshold (lists-refresh
/// `--force`, which the refusal names); without it nothing is forced, and another word is
/// refused before anything runs, as REFLASH and DELETE_CRDS take only `yes`.
#[test]
fn make_lists_passes_force_only_when_asked() {
    let lists_command = |force: Option<&str>| {
        let mut make = Command::new("make");
        make.args(["--no-print-directory", "-n", "-C"])
            .arg(repo())
            .arg("lists")
            // The recipe as make would run it, without building the tools it names.
            .arg("BIN=/nonexistent/bin")
            .stdin(Stdio::null());
        if let Some(force) = force {
            make.arg(format!("FORCE={force}"));
        }
        make.output().unwrap()
    };
    let recipe = |out: &std::process::Output| {
        assert!(out.status.success(), "{}", text(out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.contains("lists-refresh --sources"))
            .unwrap_or_else(|| panic!("no lists-refresh line: {}", text(out)))
            .to_owned()
    };
    assert!(!recipe(&lists_command(None)).contains("--force"));
    assert!(recipe(&lists_command(Some("yes"))).ends_with(" --force"));
    let refused = lists_command(Some("true"));
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("FORCE=true") && stderr.contains("FORCE=yes"),
        "{stderr}"
    );
}

// --- without-secrets.sh ------------------------------------------------------------------------

/// The shell's list of secret variables is the Rust tools' list: one contract, read by scw-infra
/// and scaleway's credentials, removed by the pipelines and the Makefile's builds.
#[test]
fn without_secrets_removes_every_variable_the_credentials_read_as_the_secret() {
    let script = fs::read_to_string(repo().join("pipelines/without-secrets.sh")).unwrap();
    let line = script
        .lines()
        .find(|l| l.starts_with("without_secrets()"))
        .unwrap();
    let removed: Vec<&str> = line
        .split_whitespace()
        .skip_while(|w| *w != "env")
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "-u")
        .map(|w| w[1])
        .collect();
    assert_eq!(removed, scaleway::creds::SECRET_VARIABLES);
    // Run as a program, it runs the command without them.
    let out = Command::new("bash")
        .arg(repo().join("pipelines/without-secrets.sh"))
        .args(["sh", "-c", "env"])
        .env("SCW_SECRET_KEY", "s")
        .env("SCW_TOKEN", "t")
        .env("KEPT", "k")
        .output()
        .unwrap();
    let env = text(&out);
    assert!(
        env.contains("KEPT=k") && !env.contains("SCW_SECRET_KEY") && !env.contains("SCW_TOKEN"),
        "{env}"
    );
}
