//! `make cluster-status` (pipelines/cluster-status.sh) with a kubectl stand-in that answers the
//! queries the script makes from a folder of canned answers (what kubectl prints for those
//! jsonpath queries: fields separated by `|`), and fails like kubectl (exit 1) for an object or a
//! resource type that does not exist.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use testkit::pin;

const KUBECTL: &str = r#"#!/usr/bin/env bash
# kubectl stand-in: `get --raw /readyz`; `[-n NS] get KIND [NAME|-A] -o jsonpath=...`;
# `-n NS exec TARGET -- COMMAND...`.
# Answers from $ANSWERS/<ns>_<kind>_<name> (or <kind>_-A for -A); absent: NotFound, exit 1.
# exec answers from $ANSWERS/exec_<ns>_<target, / as _>, exiting with the code in the file of the
# same name ending .rc (default 0); absent: NotFound, exit 1.
ns=_; args=()
while (( $# )); do
  case "$1" in
    -n) ns=$2; shift 2 ;;
    -o) shift 2 ;;
    --) break ;;
    *) args+=("$1"); shift ;;
  esac
done
if [[ "${args[0]}" == exec ]]; then
  file="$ANSWERS/exec_${ns}_${args[1]//\//_}"
  [[ -f "$file" ]] || { echo "Error from server (NotFound): ${args[1]} not found" >&2; exit 1; }
  printf '%b' "$(cat "$file")"
  exit "$(cat "$file.rc" 2>/dev/null || echo 0)"
fi
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

/// curl stand-in: records its arguments in $ANSWERS/curl_args, prints $ANSWERS/curl_code (what
/// `-w '%{http_code}'` prints) and exits with $ANSWERS/curl_rc (curl's EXIT CODES: 6 the name
/// does not resolve, 7 connection refused, 28 timeout, 60 certificate not trusted).
const CURL: &str = r#"#!/usr/bin/env bash
printf '%s\n' "$*" > "$ANSWERS/curl_args"
cat "$ANSWERS/curl_code" 2>/dev/null || printf '000'
exit "$(cat "$ANSWERS/curl_rc" 2>/dev/null || echo 6)"
"#;

/// getent stand-in: `getent ahostsv4 NAME` prints $ANSWERS/getent_<name> (getent's format: one
/// `address STREAM name` line per socket type), exit 2 when absent (getent(1): key not found).
const GETENT: &str = r#"#!/usr/bin/env bash
[[ "$1" == ahostsv4 ]] || exit 64
file="$ANSWERS/getent_$2"
[[ -f "$file" ]] || exit 2
cat "$file"
"#;

fn status(answers: &Path, dir: &Path) -> Output {
    status_of(answers, dir, &[])
}

fn status_of(answers: &Path, dir: &Path, env: &[(&str, &Path)]) -> Output {
    let bin = dir.join("bin");
    fs::create_dir_all(&bin).unwrap();
    for (name, text) in [("kubectl", KUBECTL), ("curl", CURL), ("getent", GETENT)] {
        let path = bin.join(name);
        fs::write(&path, text).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let kubeconfig = dir.join("kubeconfig");
    fs::write(&kubeconfig, "# never read: kubectl is a stand-in\n").unwrap();
    let mut command = Command::new("bash");
    command
        .arg(testkit::workspace::root().join("pipelines/cluster-status.sh"))
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        )
        .env("KUBECONFIG", kubeconfig)
        .env("ANSWERS", answers)
        .env_remove("PROFILE")
        .env_remove("NAMES")
        .stdin(Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().unwrap()
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

/// What render-platform writes for the onprem example (its status.env), and a healthy on-premises
/// cluster's answers.
fn onprem(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    crate::onprem_profile::render_example(dir, &crate::onprem_profile::sops_file());
    let rendered = dir.join("rendered");
    let answers = dir.join("answers");
    fs::create_dir_all(&answers).unwrap();
    answer(
        &answers,
        "__nodes_all",
        "cp-1|True||v1.36.3\\nworker-1|True||v1.36.3\\nworker-2|True||v1.36.3\\n",
    );
    answer(&answers, "exec_kube-system_ds_cilium", "OK\\n");
    answer(&answers, "__storageclass_ceph-rbd", "true|rbd.csi.ceph.com");
    answer(&answers, "traefik_svc_traefik", "10.20.1.100");
    answer(
        &answers,
        "exec_crowdsec_deploy_crowdsec-lapi",
        "name,ip,revoked,last_pull,type,version,auth_type\\ntraefik,10.244.1.7,validated,2026-12-01T10:00:00Z,Crowdsec-Bouncer-Traefik-Plugin,1.X.X,api-key\\n",
    );
    answer(
        &answers,
        "getent_whoami.demo.k8s.exemple.fr",
        "203.0.113.47    STREAM whoami.demo.k8s.exemple.fr\n203.0.113.47    DGRAM  \n",
    );
    answer(&answers, "curl_code", "200");
    answer(&answers, "curl_rc", "0");
    (answers, rendered.join("status.env"))
}

#[test]
fn the_onprem_table_is_the_seeds_checks_each_saying_where_to_look() {
    let dir = tempfile::tempdir().unwrap();
    let (answers, names) = onprem(dir.path());
    let profile = Path::new("onprem");
    let env = [("PROFILE", profile), ("NAMES", names.as_path())];
    let out = status_of(&answers, dir.path(), &env);
    let table = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{table}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 3 nodes, Cilium, the StorageClass, Traefik, the bouncer, the smoke test's name.
    assert_eq!(table.lines().count(), 1 + 3 + 5, "{table}");
    assert!(
        table
            .lines()
            .skip(1)
            .all(|l| l.split_whitespace().nth(2) == Some("ok")),
        "{table}"
    );
    assert_eq!(
        row(&table, "traefik/svc/traefik")[3..],
        ["EXTERNAL-IP", "10.20.1.100"]
    );
    assert_eq!(
        row(&table, "whoami.demo.k8s.exemple.fr")[3..6],
        ["HTTP", "200", "at"]
    );
    // The example issues from Let's Encrypt's staging: its certificate is not trusted, so the
    // probe does not ask it to be, and says so.
    let args = fs::read_to_string(answers.join("curl_args")).unwrap();
    assert!(
        args.contains("--insecure") && args.contains("https://whoami.demo.k8s.exemple.fr/"),
        "{args}"
    );
    assert!(table.contains("staging certificate"), "{table}");

    // Each failure is named with where to look.
    answer(
        &answers,
        "exec_kube-system_ds_cilium",
        "error: KVStore: Failure\\n",
    );
    answer(&answers, "exec_kube-system_ds_cilium.rc", "1");
    answer(&answers, "__storageclass_ceph-rbd", "|rbd.csi.ceph.com");
    answer(&answers, "traefik_svc_traefik", "");
    answer(
        &answers,
        "exec_crowdsec_deploy_crowdsec-lapi",
        "name,ip,revoked,last_pull,type,version,auth_type\\ntraefik,,validated,,,,api-key\\n",
    );
    answer(&answers, "curl_rc", "7");
    answer(&answers, "curl_code", "000");
    let out = status_of(&answers, dir.path(), &env);
    let table = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(out.status.code(), Some(1), "{table}");
    for (name, state, hint) in [
        ("kube-system/ds/cilium", "DEGRADED", "cilium status"),
        (
            "storageclass/ceph-rbd",
            "NOT-DEFAULT",
            "kubectl get storageclass",
        ),
        (
            "traefik/svc/traefik",
            "PENDING",
            "ciliumloadbalancerippool demo-pool",
        ),
        ("bouncer/traefik", "NOT-PULLING", "crowdsec-bouncer-key"),
        (
            "whoami.demo.k8s.exemple.fr",
            "UNREACHABLE",
            "forwarding of 80 and 443 to 10.20.1.100",
        ),
    ] {
        let line = table
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap();
        assert_eq!(line.split_whitespace().nth(2), Some(state), "{line}");
        assert!(line.contains(hint), "{line}");
    }
    // A name published at the internal address (the seed's lesson).
    answer(
        &answers,
        "getent_whoami.demo.k8s.exemple.fr",
        "10.20.1.100     STREAM whoami.demo.k8s.exemple.fr\n",
    );
    let out = status_of(&answers, dir.path(), &env);
    let table = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        row(&table, "whoami.demo.k8s.exemple.fr")[2],
        "WRONG-DNS",
        "{table}"
    );
}
