//! The harness the lists-refresh test binaries share: a job folder with its ServiceAccount
//! token, the real generators, and the two ways the job runs (against an API server, or into a
//! folder).
// Each test binary compiles this module and uses part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use testkit::http::{Reply, Server};
use testkit::workspace;

pub const NOW: &str = "2026-11-29T17:17:00Z";
pub const CM: &str = "/api/v1/namespaces/edge/configmaps/policy-lists";
pub const WASM: &str = "/apis/extensions.istio.io/v1alpha1/namespaces/edge/wasmplugins/pow-filter";

/// The directory of the generators, built beside this test (testkit builds them if needed).
pub fn generators() -> PathBuf {
    workspace::bin("lists-gen-asn");
    workspace::bin("lists-gen-crawlers");
    let tor = workspace::bin("lists-gen-tor");
    tor.parent().unwrap().to_path_buf()
}

/// The API server's answer to reading the lists' ConfigMap holding `data`, at resourceVersion
/// 42 (which an apply must carry back).
pub fn configmap(data: Value) -> Reply {
    Reply::json(
        200,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "policy-lists", "namespace": "edge", "resourceVersion": "42"},
               "data": data})
        .to_string(),
    )
}

/// The API server of a run that writes: it reads the ConfigMap and the WasmPlugin (these
/// answers), then both applies succeed.
pub fn writing_run(configmap: Reply, wasmplugin: Reply) -> Server {
    Server::start(vec![
        configmap,
        wasmplugin,
        Reply::json(200, "{}"),
        Reply::json(200, "{}"),
    ])
    .unwrap()
}

/// The keys of a ConfigMap's `data`, in order.
pub fn data_keys(configmap: &Value) -> Vec<&str> {
    configmap["data"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The log of a run that must exit 1: some list or agent failed (the others published).
#[track_caller]
pub fn failure_log(out: &Output) -> String {
    let log = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{log}");
    log
}

pub struct Job {
    pub dir: tempfile::TempDir,
    pub generators: PathBuf,
}

impl Job {
    /// A job folder holding the ServiceAccount's token.
    pub fn new() -> Job {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "test-token\n").unwrap();
        Job {
            dir,
            generators: generators(),
        }
    }

    /// Writes the ListSources record the job reads.
    pub fn write_sources(&self, record: &Value) -> PathBuf {
        let file = self.dir.path().join("sources.json");
        std::fs::write(&file, record.to_string()).unwrap();
        file
    }

    /// The job against `api`, publishing to the ConfigMap and WasmPlugin of `CM` and `WASM`.
    pub fn run(&self, api: &Server, sources: &Path) -> Output {
        Command::new(env!("CARGO_BIN_EXE_lists-refresh"))
            .arg("--namespace=edge")
            .arg("--configmap=policy-lists")
            .arg("--wasmplugin=pow-filter")
            .arg(format!("--sources={}", sources.display()))
            .arg(format!("--api-server={}", api.url))
            .arg(format!(
                "--serviceaccount-dir={}",
                self.dir.path().display()
            ))
            .arg(format!("--generators-dir={}", self.generators.display()))
            .arg(format!("--now={NOW}"))
            .env_remove("EDGEPOP_LOG")
            .output()
            .unwrap()
    }

    /// [`Job::run`], which must succeed.
    #[track_caller]
    pub fn run_ok(&self, api: &Server, sources: &Path) -> Output {
        let out = self.run(api, sources);
        assert!(out.status.success(), "{}", stderr(&out));
        out
    }

    /// [`Job::run`] when some list or agent must fail: the run exits 1 (the others published);
    /// its log.
    pub fn run_failing(&self, api: &Server, sources: &Path) -> String {
        failure_log(&self.run(api, sources))
    }

    /// `lists-refresh --out-dir DIR`: no API server, no ServiceAccount.
    pub fn run_into(&self, dir: &Path, sources: &Path) -> Output {
        Command::new(env!("CARGO_BIN_EXE_lists-refresh"))
            .arg(format!("--sources={}", sources.display()))
            .arg(format!("--out-dir={}", dir.display()))
            .arg(format!("--generators-dir={}", self.generators.display()))
            .env_remove("EDGEPOP_LOG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .unwrap()
    }
}
