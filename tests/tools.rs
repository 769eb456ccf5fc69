//! `make tools`: the operator's clients (talosctl, kubectl, helm, sops, etcdutl) built at their
//! pins into one folder, from the cache the tests' setup fills (`pipelines/setup.sh test` builds
//! the same pins), and that folder first on the PATH of the Makefile's recipes.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use testkit::process::text;

use testkit::pin;

const TEST: &str = "tools";

/// Each tool, the pin it must report, and the command that reports it (offline).
const TOOLS: [(&str, &str, &[&str]); 5] = [
    ("talosctl", "TALOSCTL_VERSION", &["version", "--client"]),
    ("kubectl", "KUBERNETES_VERSION", &["version", "--client"]),
    ("helm", "HELM_VERSION", &["version", "--short"]),
    (
        "sops",
        "SOPS_VERSION",
        &["--version", "--disable-version-check"],
    ),
    ("etcdutl", "ETCD_CLIENTS_VERSION", &["version"]),
];

/// The cached builds, or `None` (skipped) when the setup has not built them: the test never
/// builds them itself.
fn cached() -> Option<Vec<PathBuf>> {
    TOOLS
        .iter()
        .map(|(name, _, _)| testkit::upstream::program(TEST, name))
        .collect()
}

fn make(tools_dir: &Path, args: &[&str]) -> Output {
    Command::new("make")
        .args(["--no-print-directory", "-C"])
        .arg(testkit::workspace::root())
        .args(args)
        .arg(format!("TOOLS_DIR={}", tools_dir.display()))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `make tools` into `tools_dir`, which must succeed.
fn make_tools(tools_dir: &Path) -> Output {
    let out = make(tools_dir, &["tools"]);
    assert!(out.status.success(), "{}", text(&out));
    out
}

#[test]
fn make_tools_links_each_client_at_its_pin_from_the_cache() {
    let Some(cached) = cached() else { return };
    let dir = tempfile::tempdir().unwrap();
    let tools_dir = dir.path().join("tools/bin");
    let out = make_tools(&tools_dir);
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    for ((name, key, version_args), cached) in TOOLS.iter().zip(&cached) {
        let tool = tools_dir.join(name);
        assert!(
            listed.contains(&format!("{name}\t{}", tool.display())),
            "{listed}"
        );
        // The cache's own build, not a second one (a hard link on the same filesystem).
        let (a, b) = (fs::metadata(&tool).unwrap(), fs::metadata(cached).unwrap());
        assert_eq!(a.len(), b.len(), "{name}");
        if a.dev() == b.dev() {
            assert_eq!(a.ino(), b.ino(), "{name} is not the cache's build");
        }
        let said = Command::new(&tool).args(*version_args).output().unwrap();
        let version = pin(key);
        assert!(
            text(&said).contains(version.trim_start_matches('v')),
            "{name} does not report {key}={version}: {}",
            text(&said)
        );
    }
    // Again: nothing rebuilt, the same folder.
    let again = make_tools(&tools_dir);
    assert!(!text(&again).contains("building"), "{}", text(&again));
}

#[test]
fn the_tools_folder_comes_first_on_the_recipes_path_once_it_exists() {
    let Some(_) = cached() else { return };
    let dir = tempfile::tempdir().unwrap();
    let tools_dir = dir.path().join("bin");
    make_tools(&tools_dir);
    // make check runs with the folder first: the pinned helm and kubectl, whatever else the
    // machine has.
    let bin = testkit::workspace::bin("scw-infra");
    let bin = bin.parent().unwrap();
    // The tools make check builds are the ones cargo built for this test (RUST_SOURCES=).
    testkit::workspace::bin("render-edge");
    testkit::workspace::bin("render-platform");
    let check = make(
        &tools_dir,
        &["check", &format!("BIN={}", bin.display()), "RUST_SOURCES="],
    );
    let report = text(&check);
    let helm = format!("ok       helm {}", pin("HELM_VERSION"));
    assert!(report.contains(&helm), "no `{helm}` in:\n{report}");
    let kubectl = pin("KUBERNETES_VERSION");
    let kubectl = format!("ok       kubectl {}", kubectl.rsplit_once('.').unwrap().0);
    assert!(report.contains(&kubectl), "no `{kubectl}` in:\n{report}");
    // eval "$(make kubeconfig)" gives the operator's shell the same clients, and the cluster's
    // talosconfig once apply wrote it.
    let kubeconfig = dir.path().join("kubeconfig");
    fs::write(&kubeconfig, "").unwrap();
    let out_dir = dir.path().join("out");
    let exports = |out_dir: &Path| {
        make(
            &tools_dir,
            &[
                "-s",
                "kubeconfig",
                &format!("KUBECONFIG={}", kubeconfig.display()),
                &format!("OUT={}", out_dir.display()),
            ],
        )
    };
    let path = format!("export PATH='{}':\"$PATH\"\n", tools_dir.display());
    let said = exports(&out_dir);
    assert!(said.status.success(), "{}", text(&said));
    assert_eq!(
        String::from_utf8_lossy(&said.stdout),
        format!("export KUBECONFIG='{}'\n{path}", kubeconfig.display())
    );
    fs::create_dir(&out_dir).unwrap();
    fs::write(out_dir.join("talosconfig"), "").unwrap();
    let said = exports(&out_dir);
    assert_eq!(
        String::from_utf8_lossy(&said.stdout),
        format!(
            "export KUBECONFIG='{}'\nexport TALOSCONFIG='{}'\n{path}",
            kubeconfig.display(),
            out_dir.join("talosconfig").display()
        )
    );
}

#[test]
fn a_tool_the_cache_does_not_build_is_refused_by_name() {
    let out = Command::new("bash")
        .arg(testkit::workspace::root().join("pipelines/upstream.sh"))
        .args(["paths", "kubectl", "helmfile"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("no upstream program is named helmfile"),
        "{}",
        text(&out)
    );
}
