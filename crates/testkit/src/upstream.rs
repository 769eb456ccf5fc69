//! The real upstream programs the tests run (etcd with etcdctl and etcdutl, the Kubernetes control
//! plane and kubectl, kwok, talosctl, sops, age, prometheus, promtool, kube-state-metrics), built
//! at the pins of `k8s/versions.env` by `pipelines/upstream.sh`, which `make test`'s setup runs.
//! Their paths come from `pipelines/upstream.sh paths`, the one place that knows the cache's
//! layout: nothing here hard-codes one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// `name -> path` for every program (and `kwok-stages`, kwok's Stage files), built or not.
#[allow(clippy::panic)] // a test helper: a script that cannot answer fails the test, saying why
fn paths() -> &'static BTreeMap<String, PathBuf> {
    static PATHS: OnceLock<BTreeMap<String, PathBuf>> = OnceLock::new();
    PATHS.get_or_init(|| {
        let script = crate::workspace::root().join("pipelines/upstream.sh");
        let out = match Command::new("bash").arg(&script).arg("paths").output() {
            Ok(out) if out.status.success() => out,
            Ok(out) => panic!(
                "{} paths failed: {}",
                script.display(),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(err) => panic!("cannot run {}: {err}", script.display()),
        };
        parse_paths(&String::from_utf8_lossy(&out.stdout))
    })
}

/// Reads `name<TAB>path` lines.
#[allow(clippy::panic)] // a test helper: a line it cannot read fails the test, saying which
fn parse_paths(text: &str) -> BTreeMap<String, PathBuf> {
    text.lines()
        .map(|line| match line.split_once('\t') {
            Some((name, path)) => (name.to_owned(), PathBuf::from(path)),
            None => panic!("pipelines/upstream.sh paths: not `name<TAB>path`: {line:?}"),
        })
        .collect()
}

/// The path of the upstream program `name` (`kube-apiserver`, `kubectl`, `etcd`, `etcdutl`,
/// `kwok`, `talosctl`, `sops`, `age`, ...), or `None` after [`crate::skip_or_fail`] when it is
/// not built yet (`make upstream` builds it). A name the script does not know fails the test.
#[allow(clippy::panic)] // a misspelt name is the test's bug
pub fn program(test: &str, name: &str) -> Option<PathBuf> {
    let Some(path) = paths().get(name) else {
        panic!("pipelines/upstream.sh builds no program named {name}")
    };
    if path.exists() {
        Some(path.clone())
    } else {
        crate::skip_or_fail(
            test,
            &format!("{name} (expected at {}: run make upstream)", path.display()),
        );
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;

    #[test]
    fn every_program_has_a_path_under_the_cache_named_by_its_pin() {
        let paths = paths();
        for (name, key) in [
            ("kube-apiserver", "KUBERNETES_VERSION"),
            ("kubectl", "KUBERNETES_VERSION"),
            ("etcd", "ETCD_VERSION"),
            ("etcdctl", "ETCD_CLIENTS_VERSION"),
            ("etcdutl", "ETCD_CLIENTS_VERSION"),
            ("kwok", "KWOK_VERSION"),
            ("kwok-stages", "KWOK_VERSION"),
            ("talosctl", "TALOSCTL_VERSION"),
            ("sops", "SOPS_VERSION"),
            ("age-keygen", "AGE_VERSION"),
            ("prometheus", "PROMETHEUS_VERSION"),
            ("promtool", "PROMETHEUS_VERSION"),
            ("kube-state-metrics", "KUBE_STATE_METRICS_VERSION"),
        ] {
            let path = paths.get(name).unwrap_or_else(|| panic!("no {name}"));
            let version = path.parent().unwrap().file_name().unwrap();
            assert_eq!(
                version.to_str().unwrap(),
                crate::pin(key),
                "{name}: {path:?}"
            );
        }
    }

    #[test]
    fn a_line_without_a_tab_is_refused() {
        let refused = std::panic::catch_unwind(|| parse_paths("kubectl /x\n"));
        let message = *refused.unwrap_err().downcast::<String>().unwrap();
        assert!(message.contains("not `name<TAB>path`"), "{message}");
        assert_eq!(
            parse_paths("kubectl\t/a b/kubectl\n")["kubectl"],
            PathBuf::from("/a b/kubectl")
        );
    }
}
