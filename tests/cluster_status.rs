//! `make cluster-status` (pipelines/cluster-status.sh) with a kubectl stand-in that answers the
//! queries the script makes from a folder of canned answers (what kubectl prints for those
//! jsonpath queries: fields separated by `|`), and fails like kubectl (exit 1) for an object or a
//! resource type that does not exist.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const KUBECTL: &str = r#"#!/usr/bin/env bash
# kubectl stand-in: `get --raw /readyz`; `[-n NS] get KIND [NAME|-A] -o jsonpath=...`.
# Answers from $ANSWERS/<ns>_<kind>_<name> (or <kind>_-A for -A); absent: NotFound, exit 1.
ns=_; args=()
while (( $# )); do
  case "$1" in
    -n) ns=$2; shift 2 ;;
    -o) shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
[[ "${args[0]}" == get ]] || { echo "unexpected: ${args[*]}" >&2; exit 64; }
[[ "${args[1]}" == --raw ]] && { echo ok; exit 0; }
file="$ANSWERS/${ns}_${args[1]}_${args[2]:-all}"
[[ -f "$file" ]] || { echo "Error from server (NotFound): ${args[1]} \"${args[2]:-}\" not found" >&2; exit 1; }
printf '%b' "$(cat "$file")"
"#;

fn answer(dir: &Path, name: &str, text: &str) {
    fs::write(dir.join(name), text).unwrap();
}

/// A healthy cluster: every answer the script asks for.
fn healthy(answers: &Path, gateway_api: &str) {
    answer(
        answers,
        "__nodes_all",
        "cp-1|True||v1.36.0\\nedge-worker-1|True||v1.36.0\\n",
    );
    for (ns, kind, name, counts) in [
        ("kube-system", "ds", "cilium", "4/4"),
        ("kube-system", "deploy", "cilium-operator", "2/2"),
        ("kube-system", "deploy", "hubble-relay", "1/1"),
        ("cert-manager", "deploy", "cert-manager", "1/1"),
        ("cert-manager", "deploy", "cert-manager-webhook", "1/1"),
        ("cert-manager", "deploy", "cert-manager-cainjector", "1/1"),
        ("istio-system", "deploy", "istiod", "1/1"),
    ] {
        answer(answers, &format!("{ns}_{kind}_{name}"), counts);
    }
    for crd in [
        "backendtlspolicies",
        "gatewayclasses",
        "gateways",
        "grpcroutes",
        "httproutes",
        "referencegrants",
    ] {
        answer(
            answers,
            &format!("__crd_{crd}.gateway.networking.k8s.io"),
            &format!("True|{gateway_api}"),
        );
    }
    answer(
        answers,
        "__gateways.gateway.networking.k8s.io_-A",
        "edge/edge-gateway|True|203.0.113.10\\n",
    );
    answer(
        answers,
        "__certificates.cert-manager.io_-A",
        "edge/www-tls|True|expires 2027-02-28T00:00:00Z\\n",
    );
    answer(
        answers,
        "__wasmplugins.extensions.istio.io_-A",
        "edge/pow-filter||oci://ghcr.io/edgepop/pow-filter@sha256:ab\\n",
    );
}

fn status(answers: &Path, dir: &Path) -> Output {
    let bin = dir.join("bin");
    fs::create_dir_all(&bin).unwrap();
    let kubectl = bin.join("kubectl");
    fs::write(&kubectl, KUBECTL).unwrap();
    fs::set_permissions(&kubectl, fs::Permissions::from_mode(0o755)).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    fs::write(&kubeconfig, "# never read: kubectl is a stand-in\n").unwrap();
    Command::new("bash")
        .arg(testkit::workspace::root().join("pipelines/cluster-status.sh"))
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        )
        .env("KUBECONFIG", kubeconfig)
        .env("ANSWERS", answers)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn pin(key: &str) -> String {
    fs::read_to_string(testkit::workspace::root().join("k8s/versions.env"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_owned))
        .unwrap()
}

fn row<'a>(table: &'a str, name: &str) -> Vec<&'a str> {
    table
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("no row {name} in:\n{table}"))
        .split_whitespace()
        .collect()
}

#[test]
fn a_healthy_cluster_is_one_table_of_ok_rows() {
    let dir = tempfile::tempdir().unwrap();
    let answers = dir.path().join("answers");
    fs::create_dir_all(&answers).unwrap();
    healthy(&answers, &pin("GATEWAY_API_VERSION"));
    let out = status(&answers, dir.path());
    let table = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{table}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["COMPONENT", "NAME", "STATE", "DETAIL"]
    );
    // 2 nodes, 7 workloads, 6 CRDs, a gateway, a certificate, the filter.
    assert_eq!(lines.len(), 1 + 2 + 7 + 6 + 3, "{table}");
    assert!(
        lines[1..]
            .iter()
            .all(|l| l.split_whitespace().nth(2) == Some("ok")),
        "{table}"
    );
    assert_eq!(row(&table, "kube-system/ds/cilium")[3..5], ["4/4", "ready"]);
    assert_eq!(row(&table, "edge/edge-gateway")[3], "203.0.113.10");
    assert_eq!(row(&table, "edge/pow-filter")[0], "filter");
}

#[test]
fn what_is_not_ok_is_named_and_the_exit_is_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let answers = dir.path().join("answers");
    fs::create_dir_all(&answers).unwrap();
    healthy(&answers, "v1.3.0");
    answer(
        &answers,
        "__nodes_all",
        "cp-1|True|true|v1.36.0\\nedge-worker-1|False||v1.36.0\\n",
    );
    fs::remove_file(answers.join("istio-system_deploy_istiod")).unwrap();
    answer(&answers, "kube-system_ds_cilium", "3/4");
    fs::remove_file(answers.join("__wasmplugins.extensions.istio.io_-A")).unwrap();
    answer(
        &answers,
        "__certificates.cert-manager.io_-A",
        "edge/www-tls|False|expires \\n",
    );
    let out = status(&answers, dir.path());
    let table = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(out.status.code(), Some(1), "{table}");
    assert_eq!(row(&table, "cp-1")[2], "CORDONED");
    assert_eq!(row(&table, "edge-worker-1")[2], "NOT-READY");
    assert_eq!(row(&table, "kube-system/ds/cilium")[2], "DEGRADED");
    assert_eq!(row(&table, "istio-system/deploy/istiod")[2], "ABSENT");
    assert_eq!(
        row(&table, "gateways.gateway.networking.k8s.io")[2],
        "DRIFT"
    );
    assert_eq!(row(&table, "edge/www-tls")[2], "NOT-READY");
    assert_eq!(row(&table, "wasmplugins.extensions.istio.io")[2], "ABSENT");
    assert!(String::from_utf8_lossy(&out.stderr).contains("row(s) not ok"));
}
