//! The README's deployment block followed command by command, as a newcomer would, up to the
//! first command that needs the real cloud (`make apply`): in a scratch checkout (the
//! repository's Makefile, pipelines and pins linked, its example configs copied, so the `cp`
//! lines write there), with fake Scaleway credentials and stand-ins for what is outside: the
//! upstream cache the tests' setup fills for `make tools`, a loopback server of the pinned CRDs
//! for `make vendor`, an Image Factory on loopback for `make talos-image-digests`. Every command
//! before `make apply` must succeed without a MISSING or INVALID line, and `make check` must say
//! ready: a step the block leaves out, or a message that sends the reader elsewhere, fails here.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use testkit::process::text;

use testkit::http::{Reply, Server};

const TEST: &str = "readme_walk";

/// The commands of the README's `sh` block under "Deploying on Scaleway", comments removed.
fn deployment_block(readme: &str) -> Vec<String> {
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("Deploying on Scaleway"))
        .expect("README.md has no section `Deploying on Scaleway`");
    let block = section
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .expect("the deployment section has no ```sh block")
        .0;
    block
        .lines()
        .map(|line| line.split_once(" #").map_or(line, |(cmd, _)| cmd).trim())
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// A checkout of its own: what the Makefile reads, linked; what the commands write, local.
fn scratch_checkout(dir: &Path, factory_url: &str) -> PathBuf {
    let root = testkit::workspace::root();
    let repo = dir.join("repo");
    for sub in ["config", "k8s", "talos"] {
        fs::create_dir_all(repo.join(sub)).unwrap();
    }
    for linked in ["Makefile", "values", "k8s/upstream", "talos/patches"] {
        symlink(root.join(linked), repo.join(linked)).unwrap();
    }
    // Copied: a script finds the pins at $(dirname "$0")/../k8s, which through a link would be
    // the repository's own.
    fs::create_dir_all(repo.join("pipelines")).unwrap();
    for entry in fs::read_dir(root.join("pipelines")).unwrap() {
        let path = entry.unwrap().path();
        let copy = repo.join("pipelines").join(path.file_name().unwrap());
        fs::copy(&path, copy).unwrap();
    }
    for entry in fs::read_dir(root.join("config")).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".example.json") {
            fs::copy(&path, repo.join("config").join(path.file_name().unwrap())).unwrap();
        }
    }
    // The pins as committed, the Image Factory on loopback.
    let versions: String = fs::read_to_string(root.join("k8s/versions.env"))
        .unwrap()
        .lines()
        .map(|line| match line.split_once('=') {
            Some(("TALOS_FACTORY_URL", _)) => format!("TALOS_FACTORY_URL={factory_url}\n"),
            _ => format!("{line}\n"),
        })
        .collect();
    fs::write(repo.join("k8s/versions.env"), versions).unwrap();
    repo
}

/// `make` as the reader types it, with the tools cargo built for this test (nothing rebuilt).
fn make_shim(dir: &Path) -> PathBuf {
    let bin = testkit::workspace::bin("scw-infra");
    for tool in ["render-edge", "render-platform"] {
        testkit::workspace::bin(tool);
    }
    let shim = dir.join("shim");
    fs::create_dir_all(&shim).unwrap();
    let make = String::from_utf8(
        Command::new("bash")
            .args(["-c", "command -v make"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    testkit::sshd::script(
        &shim.join("make"),
        &format!(
            "#!/bin/bash\nexec {} BIN={} RUST_SOURCES= CARGO=true \"$@\"\n",
            make.trim(),
            bin.parent().unwrap().display()
        ),
    );
    shim
}

/// The Image Factory: the worker's schematic registered, then both images, once.
fn factory() -> Server {
    let schematic = testkit::pin("TALOS_WORKER_SCHEMATIC");
    Server::start(vec![
        Reply::json(201, format!(r#"{{"id":"{schematic}"}}"#)),
        Reply::ok(b"worker image".to_vec()),
        Reply::ok(b"control plane image".to_vec()),
    ])
    .unwrap()
}

/// make vendor's upstream: the pinned Gateway API files, rebuilt from the shared bundle and
/// served on loopback; `None` (after skip_or_fail) without python3's http.server.
fn crd_server(shared: &Path, dir: &Path) -> Option<crate::pipelines::Server> {
    let crds = shared.join("crds");
    fs::create_dir_all(dir.join("served")).unwrap();
    crate::pipelines::rebuild_upstream_files(
        &crds.join(format!(
            "gateway-api-{}-standard.yaml",
            testkit::pin("GATEWAY_API_VERSION")
        )),
        &crds.join("UPSTREAM-FILES.tsv"),
        &dir.join("served"),
    );
    let server = crate::pipelines::Server::start(&dir.join("served"));
    if server.is_none() {
        testkit::skip_or_fail(TEST, "python3 (its http.server)");
    }
    server
}

/// The reader's home: an SSH key pair where the example config looks (~/.ssh).
fn reader_home(dir: &Path) -> PathBuf {
    let home = dir.join("home");
    fs::create_dir_all(home.join(".ssh")).unwrap();
    fs::write(
        home.join(".ssh/id_ed25519.pub"),
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEdgepopTestKeyOnly operator\n",
    )
    .unwrap();
    home
}

/// The reader's machine: the scratch checkout, the make that points at the built tools, the
/// upstream cache, the stand-ins' endpoints, and credentials in the environment only.
struct Reader {
    repo: PathBuf,
    shim: PathBuf,
    home: PathBuf,
    cache: PathBuf,
    tools_dir: PathBuf,
    crd_url: String,
    scw_config: PathBuf,
}

impl Reader {
    /// One line of the README's block, as the reader's shell runs it in the checkout.
    fn run(&self, command: &str) -> Output {
        Command::new("bash")
            .args(["-euo", "pipefail", "-c", command])
            .current_dir(&self.repo)
            .env(
                "PATH",
                format!("{}:{}", self.shim.display(), std::env::var("PATH").unwrap()),
            )
            .env("HOME", &self.home)
            .env("EDGEPOP_UPSTREAM_CACHE", &self.cache)
            .env("TOOLS_DIR", &self.tools_dir)
            .env("VENDOR_BASE_URL", &self.crd_url)
            .env("SCW_CONFIG_PATH", &self.scw_config)
            .env("SCW_ACCESS_KEY", "SCWABCDEFGHIJKLMNOPQ")
            .env("SCW_SECRET_KEY", "11111111-2222-4333-8444-555555555555")
            .env(
                "SCW_DEFAULT_PROJECT_ID",
                "66666666-7777-4888-9999-000000000000",
            )
            .env_remove("SCW_PROFILE")
            .env_remove("KUBECONFIG")
            .env_remove("XDG_CACHE_HOME")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

#[test]
fn the_readme_deployment_block_runs_up_to_the_first_call_that_needs_the_cloud() {
    let Some(helm) = testkit::upstream::program(TEST, "helm") else {
        return;
    };
    for name in ["talosctl", "kubectl", "sops"] {
        let Some(_) = testkit::upstream::program(TEST, name) else {
            return;
        };
    }
    let Some(shared) = testkit::workspace::shared_dir(TEST) else {
        return;
    };
    for program in ["python3", "curl"] {
        if Command::new(program).arg("--version").output().is_err() {
            testkit::skip_or_fail(TEST, program);
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let factory = factory();
    let repo = scratch_checkout(dir.path(), &factory.url);
    let shim = make_shim(dir.path());
    let Some(crd_server) = crd_server(&shared, dir.path()) else {
        return;
    };
    let reader = Reader {
        home: reader_home(dir.path()),
        repo,
        shim,
        // <cache>/helm/<version>/helm: the cache the tests' setup filled.
        cache: helm.ancestors().nth(3).unwrap().to_path_buf(),
        tools_dir: dir.path().join("tools/bin"),
        crd_url: crd_server.url.clone(),
        scw_config: dir.path().join("no-such-config.yaml"),
    };

    let commands = deployment_block(
        &fs::read_to_string(testkit::workspace::root().join("README.md")).unwrap(),
    );
    let apply = commands
        .iter()
        .position(|c| c.starts_with("make apply"))
        .unwrap_or_else(|| panic!("the README's deployment block never applies: {commands:?}"));
    let mut walked = Vec::new();
    for command in &commands[..apply] {
        let out = reader.run(command);
        walked.push(command.clone());
        let said = text(&out);
        assert!(
            out.status.success(),
            "README step `{command}` failed, after {walked:?}:\n{said}"
        );
        for word in ["MISSING", "INVALID", "is missing", "not built"] {
            assert!(
                !said.contains(word),
                "README step `{command}` says `{word}`, after {walked:?}:\n{said}"
            );
        }
        if command == "make check" {
            assert!(
                String::from_utf8_lossy(&out.stdout).contains("make check: ready"),
                "{said}"
            );
        }
    }
    // What a newcomer needs before the first apply is all in the block, in an order that works.
    for needed in [
        "make tools",
        "make vendor",
        "make talos-image-digests",
        "make check",
    ] {
        assert!(
            walked.iter().any(|c| c == needed),
            "the README's deployment block runs no `{needed}` before `make apply`: {walked:?}"
        );
    }
    assert!(reader.repo.join("config/talos-image-digests.env").is_file());
    assert!(reader.tools_dir.join("helm").is_file());
}

#[test]
fn make_help_gives_the_first_run_in_the_readme_order() {
    let root = testkit::workspace::root();
    let readme = fs::read_to_string(root.join("README.md")).unwrap();
    // The README's make commands up to the apply, in order.
    let mut readme_steps: Vec<String> = Vec::new();
    for command in deployment_block(&readme) {
        if command.starts_with("make ") {
            readme_steps.push(command.clone());
        }
        if command == "make apply" {
            break;
        }
    }
    let help = Command::new("make")
        .args(["--no-print-directory", "-C"])
        .arg(&root)
        .arg("help")
        .output()
        .unwrap();
    let help = testkit::process::success_stdout(&help);
    // Its numbered first-run lines, before the first section; their make commands, in order.
    let first_run = help.split("\n\n").next().unwrap();
    let help_steps: Vec<String> = first_run
        .lines()
        .filter_map(|line| {
            let (number, rest) = line.trim().split_once(". ")?;
            number.parse::<u32>().ok()?;
            let command: Vec<&str> = rest.split_whitespace().take(2).collect();
            (command[0] == "make").then(|| command.join(" "))
        })
        .collect();
    assert_eq!(help_steps, readme_steps, "{first_run}");
    // The copy of the configs comes before the first make that reads them.
    assert!(
        first_run.find("cp config/") < first_run.find("make vendor"),
        "{first_run}"
    );
}
