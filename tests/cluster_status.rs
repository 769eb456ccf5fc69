//! `make cluster-status` (pipelines/cluster-status.sh). What the script does with each answer:
//! a kubectl stand-in answers its queries from a folder of canned answers (what kubectl prints
//! for those jsonpath queries: fields separated by `|`), and fails like kubectl (exit 1) for an
//! object or a resource type that does not exist. Whether the answers are those: the same
//! script with the pinned kubectl against a real API server (testkit's control plane, kwok's
//! nodes and pods, the platform's CRDs), every query but `exec` (no kubelet runs here) read
//! from real objects. The edge profile reads the names the renders give beside the cluster:
//! render-platform's status.env (the edge nodes' label) and render-edge's names (the gateway's
//! namespace and pods), rendered from the examples.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use testkit::control_plane::ControlPlane;
use testkit::pin;

const KUBECTL: &str = r#"#!/usr/bin/env bash
# kubectl stand-in: `get --raw /readyz`; `[-n NS] get KIND [NAME|-A] [-l SELECTOR] -o jsonpath=...`;
# `-n NS exec TARGET -- COMMAND...`.
# Answers from $ANSWERS/<ns>_<kind>_<name> (or <kind>_-A for -A, <kind>_all for a list; with -l,
# `_l_<selector, / as _>` after it); absent: NotFound, exit 1, but for a selector, which matches
# nothing (an empty list, exit 0).
# exec answers from $ANSWERS/exec_<ns>_<target, / as _>, exiting with the code in the file of the
# same name ending .rc (default 0); absent: NotFound, exit 1.
ns=_; selector=; args=()
while (( $# )); do
  case "$1" in
    -n) ns=$2; shift 2 ;;
    -l) selector=$2; shift 2 ;;
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
file="$ANSWERS/${ns}_${args[1]}_${args[2]:-all}${selector:+_l_${selector//\//_}}"
[[ -f "$file" || -z "$selector" ]] || exit 0
[[ -f "$file" ]] || { echo "Error from server (NotFound): ${args[1]} \"${args[2]:-}\" not found" >&2; exit 1; }
printf '%b' "$(cat "$file")"
"#;

fn answer(dir: &Path, name: &str, text: &str) {
    fs::write(dir.join(name), text).unwrap();
}

/// A folder for the answers, made in `dir`.
fn answers_in(dir: &Path) -> PathBuf {
    let answers = dir.join("answers");
    fs::create_dir_all(&answers).unwrap();
    answers
}

/// The table the script printed, after it exited with `code`.
#[track_caller]
fn table_of(out: &Output, code: i32) -> String {
    let table = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{table}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    table
}

/// The edge nodes' label as a selector, as render-platform writes it into status.env.
fn edge_node_label() -> String {
    let (key, value) = pop_common::records::EDGE_NODE_LABEL;
    format!("{key}={value}")
}

/// The answer to `kubectl -n edge get pods -l <the gateway's pods, render-edge's names>`.
const EDGE_GATEWAY_PODS_ANSWER: &str =
    "edge_pods_all_l_gateway.networking.k8s.io_gateway-name=edge-gateway";

/// The answer to `kubectl get nodes -l <selector>`.
fn edge_nodes_answer(selector: &str) -> String {
    format!("__nodes_all_l_{}", selector.replace('/', "_"))
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
        &edge_nodes_answer(&edge_node_label()),
        "edge-worker-1\\n",
    );
    answer(
        answers,
        EDGE_GATEWAY_PODS_ANSWER,
        "edge-worker-1|edge-gateway-istio-5c9d8f7b4-x2x7q|Running|True\\n",
    );
    for (name, text) in [
        (
            "__gateways.gateway.networking.k8s.io_-A",
            "edge/edge-gateway|True|203.0.113.10\\n",
        ),
        (
            "__certificates.cert-manager.io_-A",
            "edge/www-tls|True|expires 2027-02-28T00:00:00Z\\n",
        ),
        (
            "__wasmplugins.extensions.istio.io_-A",
            "edge/pow-filter||oci://ghcr.io/edgepop/pow-filter@sha256:ab\\n",
        ),
    ] {
        answer(answers, name, text);
    }
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

/// dig stand-in: `dig +short ... A NAME` prints $ANSWERS/dig_<name> (dig's +short form: a CNAME
/// chain, then the addresses, one a line; nothing for a name the DNS does not know, exit 0) and
/// exits with $ANSWERS/dig_rc (dig(1) EXIT STATUS: 9, no reply from the server).
const DIG: &str = r#"#!/usr/bin/env bash
name=${*: -1}
cat "$ANSWERS/dig_$name" 2>/dev/null
exit "$(cat "$ANSWERS/dig_rc" 2>/dev/null || echo 0)"
"#;

fn status(answers: &Path, dir: &Path) -> Output {
    status_of(answers, dir, &[])
}

fn status_of(answers: &Path, dir: &Path, env: &[(&str, &Path)]) -> Output {
    let kubeconfig = dir.join("kubeconfig");
    fs::write(&kubeconfig, "# never read: kubectl is a stand-in\n").unwrap();
    let tools = [
        ("kubectl", KUBECTL),
        ("curl", CURL),
        ("getent", GETENT),
        ("dig", DIG),
    ];
    script(&tools, &kubeconfig, answers, dir, env)
        .output()
        .unwrap()
}

/// The script, with `tools` (name and text) installed first on its PATH, the kubeconfig and
/// the answers given, and `env` on top.
fn script(
    tools: &[(&str, &str)],
    kubeconfig: &Path,
    answers: &Path,
    dir: &Path,
    env: &[(&str, &Path)],
) -> Command {
    let bin = dir.join("bin");
    fs::create_dir_all(&bin).unwrap();
    for (name, text) in tools {
        testkit::sshd::script(&bin.join(name), text);
    }
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
        .stdin(Stdio::null());
    for (k, v) in edge_names(dir) {
        command.env(k, v);
    }
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

/// What the edge profile reads beside the cluster, rendered from the examples into `dir` once:
/// render-platform's status.env (`NAMES`) and render-edge's names (`EDGE_NAMES`).
fn edge_names(dir: &Path) -> [(&'static str, PathBuf); 2] {
    let config = testkit::workspace::root().join("config");
    let rendered = dir.join("edge-platform");
    let names = rendered.join("status.env");
    let edge_names = dir.join("edge-names.env");
    if !names.is_file() {
        crate::network_flows::render_edge_platform(
            &config.join("platform.example.json"),
            &rendered,
        );
        let out = Command::new(testkit::workspace::bin("render-edge"))
            .arg("--inputs")
            .arg(config.join("platform-inputs.example.json"))
            .arg("--config")
            .arg(config.join("edge.example.json"))
            .arg("--names")
            .output()
            .unwrap();
        fs::write(&edge_names, testkit::process::success_stdout(&out)).unwrap();
    }
    [("NAMES", names), ("EDGE_NAMES", edge_names)]
}

/// The table has `lines` lines, its header first, and every row is ok.
#[track_caller]
fn assert_all_ok(table: &str, lines: usize) {
    assert_eq!(table.lines().count(), lines, "{table}");
    assert!(
        table
            .lines()
            .skip(1)
            .all(|l| l.split_whitespace().nth(2) == Some("ok")),
        "{table}"
    );
}

fn row<'a>(table: &'a str, name: &str) -> Vec<&'a str> {
    table
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("no row {name} in:\n{table}"))
        .split_whitespace()
        .collect()
}

/// The row of `component` named `name` (a node has a row of its own and one as an edge node).
fn row_of<'a>(table: &'a str, component: &str, name: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|fields| fields.len() > 1 && fields[0] == component && fields[1] == name)
        .unwrap_or_else(|| panic!("no row {component} {name} in:\n{table}"))
}

#[test]
fn a_healthy_cluster_is_one_table_of_ok_rows() {
    let dir = tempfile::tempdir().unwrap();
    let answers = answers_in(dir.path());
    healthy(&answers, &pin("GATEWAY_API_VERSION"));
    let out = status(&answers, dir.path());
    let table = table_of(&out, 0);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["COMPONENT", "NAME", "STATE", "DETAIL"]
    );
    // 2 nodes, 7 workloads, 6 CRDs, a gateway, an edge node, a certificate, the filter.
    assert_all_ok(&table, 1 + 2 + 7 + 6 + 4);
    assert_eq!(row(&table, "kube-system/ds/cilium")[3..5], ["4/4", "ready"]);
    assert_eq!(row(&table, "edge/edge-gateway")[3], "203.0.113.10");
    assert_eq!(
        row_of(&table, "edge-node", "edge-worker-1")[3..],
        [
            "gateway",
            "pod",
            "edge-gateway-istio-5c9d8f7b4-x2x7q",
            "Ready"
        ]
    );
    assert_eq!(row(&table, "edge/pow-filter")[0], "filter");
}

#[test]
fn what_is_not_ok_is_named_and_the_exit_is_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let answers = answers_in(dir.path());
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
    let table = table_of(&out, 1);
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

/// Each edge node has a row: ok only while a Ready pod of the gateway runs on it, as DNS sends
/// it visitors whatever the others serve; otherwise what is there, and where to look.
#[test]
fn each_edge_node_needs_a_ready_gateway_pod_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let answers = answers_in(dir.path());
    healthy(&answers, &pin("GATEWAY_API_VERSION"));
    answer(
        &answers,
        "__nodes_all",
        "cp-1|True||v1.36.0\\nedge-worker-1|True||v1.36.0\\nedge-worker-2|True||v1.36.0\\n",
    );
    answer(
        &answers,
        &edge_nodes_answer(&edge_node_label()),
        "edge-worker-1\\nedge-worker-2\\n",
    );
    let look = "look at: kubectl -n edge get pods -o wide -l \
                gateway.networking.k8s.io/gateway-name=edge-gateway";
    let ready = "edge-worker-1|edge-gateway-istio-5c9d8f7b4-x2x7q|Running|True\\n";
    for (pods, detail) in [
        // Its pod runs but is not Ready.
        (
            "edge-worker-2|edge-gateway-istio-5c9d8f7b4-k8j2m|Running|False\\n",
            "edge-gateway-istio-5c9d8f7b4-k8j2m Running, Ready=False",
        ),
        // Its pod waits for a node (the scheduler sets no Ready condition).
        (
            "|edge-gateway-istio-5c9d8f7b4-k8j2m|Pending|\\n",
            "no gateway pod on it; 1 gateway pod(s) wait for a node",
        ),
    ] {
        answer(
            &answers,
            EDGE_GATEWAY_PODS_ANSWER,
            &format!("{ready}{pods}"),
        );
        let out = status(&answers, dir.path());
        let table = table_of(&out, 1);
        assert_eq!(row_of(&table, "edge-node", "edge-worker-1")[2], "ok");
        let row = row_of(&table, "edge-node", "edge-worker-2");
        assert_eq!(row[2], "NO-GATEWAY", "{table}");
        let said = row[3..].join(" ");
        assert!(said.contains(detail) && said.ends_with(look), "{table}");
        assert_eq!(row_of(&table, "node", "edge-worker-2")[2], "ok");
        assert!(String::from_utf8_lossy(&out.stderr).contains("1 row(s) not ok"));
    }
    answer(
        &answers,
        EDGE_GATEWAY_PODS_ANSWER,
        &format!("{ready}edge-worker-2|edge-gateway-istio-5c9d8f7b4-k8j2m|Running|True\\n"),
    );
    let table = table_of(&status(&answers, dir.path()), 0);
    // 3 nodes, 7 workloads, 6 CRDs, a gateway, two edge nodes, a certificate, the filter.
    assert_all_ok(&table, 1 + 3 + 7 + 6 + 5);
    assert_eq!(
        row_of(&table, "edge-node", "edge-worker-2")[5],
        "edge-gateway-istio-5c9d8f7b4-k8j2m"
    );

    // No node carries the label: the edge serves from nowhere, whatever the gateway's pods.
    answer(&answers, &edge_nodes_answer(&edge_node_label()), "");
    let table = table_of(&status(&answers, dir.path()), 1);
    let row = row_of(&table, "edge-node", &edge_node_label());
    assert_eq!(row[2], "NONE", "{table}");
    assert!(
        row[3..]
            .join(" ")
            .contains("the edge has no node to serve from"),
        "{table}"
    );
}

/// The edge nodes are those of the label status.env names (render-platform's, from its one
/// declaration): the script types none of its own. Without the names, nothing is asked.
#[test]
fn the_edge_nodes_are_found_by_the_label_status_env_names() {
    let dir = tempfile::tempdir().unwrap();
    let answers = answers_in(dir.path());
    healthy(&answers, &pin("GATEWAY_API_VERSION"));
    fs::remove_file(answers.join(edge_nodes_answer(&edge_node_label()))).unwrap();
    let selector = "edge.example.test/serves=yes";
    answer(&answers, &edge_nodes_answer(selector), "edge-worker-1\\n");
    let names = dir.path().join("status.env");
    fs::write(&names, format!("EDGE_NODE_LABEL={selector}\n")).unwrap();
    let table = table_of(&status_of(&answers, dir.path(), &[("NAMES", &names)]), 0);
    assert_eq!(row_of(&table, "edge-node", "edge-worker-1")[2], "ok");

    // The rendered status.env names the real label, which no node of these answers carries.
    let table = table_of(&status(&answers, dir.path()), 1);
    assert_eq!(row_of(&table, "edge-node", &edge_node_label())[2], "NONE");

    let missing = dir.path().join("nowhere.env");
    let out = status_of(&answers, dir.path(), &[("NAMES", &missing)]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        testkit::process::text(&out)
    );
    assert!(out.stdout.is_empty(), "{}", testkit::process::text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("writes status.env"),
        "{}",
        testkit::process::text(&out)
    );
}

/// The scheduled etcd backup's row, from the CronJob's status: none without the CronJob; ok
/// after a success or while a run is going; PENDING before the first run; FAILING when the last
/// run started after the last success.
#[test]
fn the_etcd_backup_s_last_run_is_a_row_when_there_is_a_backup() {
    let dir = tempfile::tempdir().unwrap();
    let answers = answers_in(dir.path());
    healthy(&answers, &pin("GATEWAY_API_VERSION"));
    let name = "etcd-backup/cronjob/etcd-backup";
    let cronjob = "etcd-backup_cronjob_etcd-backup";
    let table = table_of(&status(&answers, dir.path()), 0);
    assert!(!table.contains(name), "{table}");
    for (status, code, state, detail) in [
        (
            "23 * * * *|2026-12-01T10:23:00Z|2026-12-01T10:23:41Z|",
            0,
            "ok",
            "last success 2026-12-01T10:23:41Z",
        ),
        (
            "23 * * * *|2026-12-01T11:23:00Z|2026-12-01T10:23:41Z|etcd-backup-29412323",
            0,
            "ok",
            "running (etcd-backup-29412323)",
        ),
        ("23 * * * *|||", 1, "PENDING", "no run yet"),
        (
            "23 * * * *|2026-12-01T11:23:00Z|2026-12-01T10:23:41Z|",
            1,
            "FAILING",
            "the run started 2026-12-01T11:23:00Z did not succeed",
        ),
        (
            "23 * * * *|2026-12-01T11:23:00Z||",
            1,
            "FAILING",
            "(last success never)",
        ),
    ] {
        answer(&answers, cronjob, status);
        let table = table_of(&status_of(&answers, dir.path(), &[]), code);
        let got = row(&table, name);
        assert_eq!(got[2], state, "{table}");
        assert!(got[3..].join(" ").contains(detail), "{table}");
    }
}

/// What render-platform writes for the onprem example (its status.env), and a healthy on-premises
/// cluster's answers.
fn onprem(dir: &Path) -> (PathBuf, PathBuf) {
    crate::onprem_profile::render_example(dir, &crate::onprem_profile::sops_file());
    let rendered = dir.join("rendered");
    let bouncer = bouncer_name(&rendered.join("status.env"));
    let answers = answers_in(dir);
    let bouncers = format!(
        "name,ip,revoked,last_pull,type,version,auth_type\\n{bouncer},10.244.1.7,validated,2026-12-01T10:00:00Z,Crowdsec-Bouncer-Traefik-Plugin,1.X.X,api-key\\n"
    );
    for (name, text) in [
        (
            "__nodes_all",
            "cp-1|True||v1.36.3\\nworker-1|True||v1.36.3\\nworker-2|True||v1.36.3\\n",
        ),
        ("exec_kube-system_ds_cilium", "OK\\n"),
        ("__storageclass_ceph-rbd", "true|rbd.csi.ceph.com"),
        ("traefik_svc_traefik", "10.20.1.100"),
        ("exec_crowdsec_deploy_crowdsec-lapi", bouncers.as_str()),
        (
            "getent_whoami.demo.k8s.exemple.fr",
            "203.0.113.47    STREAM whoami.demo.k8s.exemple.fr\n203.0.113.47    DGRAM  \n",
        ),
        ("dig_whoami.demo.k8s.exemple.fr", "203.0.113.47\n"),
        ("curl_code", "200"),
        ("curl_rc", "0"),
        // busybox wget in a Traefik pod reached the public address (quiet, exit 0).
        ("exec_traefik_deploy_traefik", ""),
    ] {
        answer(&answers, name, text);
    }
    (answers, rendered.join("status.env"))
}

/// The bouncer's name render-platform gave (status.env).
fn bouncer_name(names: &Path) -> String {
    fs::read_to_string(names)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("BOUNCER_NAME="))
        .unwrap()
        .to_owned()
}

#[test]
fn the_onprem_table_is_the_seeds_checks_each_saying_where_to_look() {
    let dir = tempfile::tempdir().unwrap();
    let (answers, names) = onprem(dir.path());
    let profile = Path::new("onprem");
    let env = [("PROFILE", profile), ("NAMES", names.as_path())];
    let out = status_of(&answers, dir.path(), &env);
    let table = table_of(&out, 0);
    // 3 nodes, Cilium, the StorageClass, Traefik, the bouncer, the hairpin, the smoke test's
    // name.
    assert_all_ok(&table, 1 + 3 + 6);
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
    assert_each_onprem_failure_says_where_to_look(&answers, dir.path(), &env);
}

/// Each failure of the onprem table is named with where to look, a name published at the
/// internal address included.
fn assert_each_onprem_failure_says_where_to_look(
    answers: &Path,
    dir: &Path,
    env: &[(&str, &Path)],
) {
    answer(
        answers,
        "exec_kube-system_ds_cilium",
        "error: KVStore: Failure\\n",
    );
    answer(answers, "exec_kube-system_ds_cilium.rc", "1");
    answer(answers, "__storageclass_ceph-rbd", "|rbd.csi.ceph.com");
    answer(answers, "traefik_svc_traefik", "");
    // Registered, never pulled; and the bouncer of an earlier key, still accepted.
    let bouncer = bouncer_name(env[1].1);
    answer(
        answers,
        "exec_crowdsec_deploy_crowdsec-lapi",
        &format!(
            "name,ip,revoked,last_pull,type,version,auth_type\\n{bouncer},,validated,,,,api-key\\ntraefik,10.244.1.7,validated,2026-11-01T10:00:00Z,,,api-key\\n"
        ),
    );
    answer(answers, "curl_rc", "7");
    answer(answers, "curl_code", "000");
    answer(
        answers,
        "exec_traefik_deploy_traefik",
        "wget: download timed out\\n",
    );
    answer(answers, "exec_traefik_deploy_traefik.rc", "1");
    let out = status_of(answers, dir, env);
    let table = table_of(&out, 1);
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
            "ciliumloadbalancerippool demo-ingress",
        ),
        (
            format!("bouncer/{bouncer}").as_str(),
            "NOT-PULLING",
            "crowdsec-bouncer-key",
        ),
        ("bouncer/traefik", "STALE", "cscli bouncers delete traefik"),
        ("203.0.113.47", "NO-HAIRPIN", "NAT loopback"),
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
    answer(answers, "dig_whoami.demo.k8s.exemple.fr", "10.20.1.100\n");
    let out = status_of(answers, dir, env);
    let table = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        row(&table, "whoami.demo.k8s.exemple.fr")[2],
        "WRONG-DNS",
        "{table}"
    );
    assert_the_name_is_what_the_dns_answers(answers, dir, env);
}

/// The name as the DNS answers it, as the seed's `dig +short`: an /etc/hosts line (what getent
/// reads too) does not make it published; getent is the fallback when dig cannot ask, and the row
/// says which answered.
fn assert_the_name_is_what_the_dns_answers(answers: &Path, dir: &Path, env: &[(&str, &Path)]) {
    let name = "whoami.demo.k8s.exemple.fr";
    let https = |answers: &Path| {
        let out = status_of(answers, dir, env);
        let table = String::from_utf8(out.stdout).unwrap();
        table
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap()
            .to_owned()
    };
    answer(answers, "curl_code", "200");
    answer(answers, "curl_rc", "0");
    // The DNS knows nothing of it; /etc/hosts (getent) has it.
    answer(answers, &format!("dig_{name}"), "");
    let line = https(answers);
    assert_eq!(line.split_whitespace().nth(2), Some("NO-DNS"), "{line}");
    assert!(
        line.contains("(dig)") && line.contains("run this again"),
        "{line}"
    );
    // A CNAME first, then the address.
    answer(
        answers,
        &format!("dig_{name}"),
        "edge.k8s.exemple.fr.\n203.0.113.47\n",
    );
    let line = https(answers);
    assert_eq!(line.split_whitespace().nth(2), Some("ok"), "{line}");
    // dig gets no reply: getent answers, and the row says so.
    answer(answers, "dig_rc", "9");
    let line = https(answers);
    assert_eq!(line.split_whitespace().nth(2), Some("ok"), "{line}");
    assert!(line.contains("getent: /etc/hosts"), "{line}");
    fs::remove_file(answers.join("dig_rc")).unwrap();
}

/// kubectl for the real-cluster test: the pinned kubectl against the test's API server, except
/// `exec`, which needs a kubelet and a container (none runs here): that one is answered from
/// $ANSWERS by the stand-in above, installed beside it as `kubectl-canned`.
const KUBECTL_REAL_BUT_EXEC: &str = r#"#!/usr/bin/env bash
for arg in "$@"; do
  [[ "$arg" == exec ]] && exec "$(dirname "$0")/kubectl-canned" "$@"
done
exec "$REAL_KUBECTL" "$@"
"#;

/// The script against the real API server of `plane`, through [`KUBECTL_REAL_BUT_EXEC`].
fn status_real(
    plane: &ControlPlane,
    kubectl: &Path,
    answers: &Path,
    dir: &Path,
    env: &[(&str, &Path)],
) -> (Option<i32>, String) {
    let tools = [
        ("kubectl", KUBECTL_REAL_BUT_EXEC),
        ("kubectl-canned", KUBECTL),
        ("curl", CURL),
        ("getent", GETENT),
        ("dig", DIG),
    ];
    let mut command = script(&tools, plane.kubeconfig(), answers, dir, env);
    command.env("REAL_KUBECTL", kubectl);
    let out = command.output().unwrap();
    let table = String::from_utf8(out.stdout).unwrap();
    (
        out.status.code(),
        format!("{table}{}", String::from_utf8_lossy(&out.stderr)),
    )
}

/// A Deployment (or, `daemon`, a DaemonSet) of one container in `ns`, on the nodes labelled
/// `edgepop.test/pool=<pool>` (kwok runs its pods without containers).
fn workload(kind: &str, ns: &str, name: &str, pool: &str) -> serde_json::Value {
    let mut spec = serde_json::json!({
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {
                "nodeSelector": {"edgepop.test/pool": pool},
                "containers": [{"name": name, "image": "registry.example/pause:1"}],
            },
        },
    });
    if kind == "Deployment" {
        spec["replicas"] = 1.into();
    }
    serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
}

/// `kubectl patch --subresource=status` of `what` with `status` (a merge patch).
fn set_status(plane: &ControlPlane, what: &[&str], status: &serde_json::Value) {
    let patch = serde_json::json!({ "status": status }).to_string();
    let args = [
        what,
        &["--subresource=status", "--type=merge", "-p", &patch],
    ]
    .concat();
    plane.kubectl_ok(&[&["patch"], &args[..]].concat(), "");
}

fn condition(kind: &str, status: &str) -> serde_json::Value {
    serde_json::json!({
        "type": kind,
        "status": status,
        "reason": if status == "True" { kind } else { "Pending" },
        "message": "",
        "lastTransitionTime": "2026-12-01T00:00:00Z",
        "observedGeneration": 1,
    })
}

/// The queries the script makes, read by the real kubectl from a real API server (kwok's nodes
/// and pods, the platform's CRDs, objects whose status a test sets as their controllers would):
/// the canned answers above check what the script does with an answer, this checks the answers.
#[test]
fn the_queries_read_a_real_cluster_as_the_canned_answers_say() {
    const TEST: &str = "cluster_status_real";
    let Some(crds) = testkit::crds::platform(TEST) else {
        return;
    };
    let Some(kubectl) = testkit::upstream::program(TEST, "kubectl") else {
        return;
    };
    // Its own: the script lists every node and objects of every namespace.
    let Some(plane) = ControlPlane::start(TEST) else {
        return;
    };
    plane.install_crds(&crds);
    seed_an_edge_cluster(&plane);
    let dir = tempfile::tempdir().unwrap();
    let answers = answers_in(dir.path());
    assert_the_edge_table_reads_the_cluster(&plane, &kubectl, &answers, dir.path());
    assert_each_edge_node_is_served_by_its_own_pod(&plane, &kubectl, &answers, dir.path());
    assert_the_backup_row_reads_the_cron_job(&plane, &kubectl, &answers, dir.path());
    assert_the_onprem_queries_read_the_cluster(&plane, &kubectl, dir.path());
    assert_what_is_broken_in_the_cluster_is_not_ok(&plane, &kubectl, &answers, dir.path());
}

/// Two kwok nodes, the platform's workloads rolled out, and the edge's Gateway, Certificate and
/// WasmPlugin with the status their controllers would write.
fn seed_an_edge_cluster(plane: &ControlPlane) {
    let pool = ("edgepop.test/pool", "cluster");
    plane.add_node("cp-1", &[pool]);
    plane.add_node(
        "edge-worker-1",
        &[pool, pop_common::records::EDGE_NODE_LABEL],
    );
    for ns in ["cert-manager", "istio-system", "edge", "traefik"] {
        plane.kubectl_ok(&["create", "namespace", ns], "");
    }
    add_gateway_pod(plane, "edge-gateway-istio-1", Some("edge-worker-1"));
    let workloads = [
        ("DaemonSet", "kube-system", "cilium"),
        ("Deployment", "kube-system", "cilium-operator"),
        ("Deployment", "kube-system", "hubble-relay"),
        ("Deployment", "cert-manager", "cert-manager"),
        ("Deployment", "cert-manager", "cert-manager-webhook"),
        ("Deployment", "cert-manager", "cert-manager-cainjector"),
        ("Deployment", "istio-system", "istiod"),
    ];
    for (kind, ns, name) in workloads {
        plane.kubectl_ok(
            &["create", "-f", "-"],
            &workload(kind, ns, name, "cluster").to_string(),
        );
    }
    for (kind, ns, name) in workloads {
        let what = format!("{}/{name}", kind.to_lowercase());
        plane.kubectl_ok(
            &["-n", ns, "rollout", "status", &what, "--timeout=120s"],
            "",
        );
    }
    let edge_objects = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
         "metadata": {"name": "edge-gateway", "namespace": "edge"},
         "spec": {"gatewayClassName": "istio",
                  "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}},
        {"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
         "metadata": {"name": "www-tls", "namespace": "edge"},
         "spec": {"secretName": "www-tls", "dnsNames": ["www.example.com"],
                  "issuerRef": {"name": "letsencrypt", "kind": "ClusterIssuer"}}},
        {"apiVersion": "extensions.istio.io/v1alpha1", "kind": "WasmPlugin",
         "metadata": {"name": "pow-filter", "namespace": "edge"},
         "spec": {"url": "oci://ghcr.io/edgepop/pow-filter@sha256:ab"}},
    ]});
    plane.kubectl_ok(&["create", "-f", "-"], &edge_objects.to_string());
    set_status(
        plane,
        &["-n", "edge", "gateway", "edge-gateway"],
        &serde_json::json!({
            "addresses": [{"type": "IPAddress", "value": "203.0.113.10"}],
            "conditions": [condition("Accepted", "True"), condition("Programmed", "True")],
        }),
    );
    set_certificate(plane, "True");
}

/// A pod of the edge's gateway, labelled as istiod labels them, on `node` (kwok runs it and
/// reports it Ready, waited for here) or, `None`, placed nowhere: Pending, as when the gateway
/// has more replicas than edge nodes can take.
fn add_gateway_pod(plane: &ControlPlane, name: &str, node: Option<&str>) {
    let mut spec = serde_json::json!({
        "containers": [{"name": "istio-proxy", "image": "registry.example/proxyv2:1"}],
    });
    match node {
        Some(node) => spec["nodeName"] = node.into(),
        None => spec["nodeSelector"] = serde_json::json!({"edgepop.test/pool": "none"}),
    }
    let pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "edge",
                     "labels": {"gateway.networking.k8s.io/gateway-name": "edge-gateway"}},
        "spec": spec,
    });
    plane.kubectl_ok(&["create", "-f", "-"], &pod.to_string());
    if node.is_some() {
        plane.kubectl_ok(
            &[
                "-n",
                "edge",
                "wait",
                "--for=condition=Ready",
                &format!("pod/{name}"),
                "--timeout=120s",
            ],
            "",
        );
    }
}

/// The Certificate's Ready condition, as cert-manager writes it.
fn set_certificate(plane: &ControlPlane, ready: &str) {
    set_status(
        plane,
        &["-n", "edge", "certificate", "www-tls"],
        &serde_json::json!({
            "conditions": [condition("Ready", ready)],
            "notAfter": "2027-02-28T00:00:00Z",
        }),
    );
}

/// The edge profile's table of that cluster: every row ok, each with what the cluster says.
fn assert_the_edge_table_reads_the_cluster(
    plane: &ControlPlane,
    kubectl: &Path,
    answers: &Path,
    dir: &Path,
) {
    let (code, table) = status_real(plane, kubectl, answers, dir, &[]);
    assert_eq!(code, Some(0), "{table}");
    // 2 nodes, 7 workloads, 6 CRDs, a gateway, an edge node, a certificate, the filter.
    assert_all_ok(&table, 1 + 2 + 7 + 6 + 4);
    assert_eq!(
        row_of(&table, "edge-node", "edge-worker-1")[3..],
        ["gateway", "pod", "edge-gateway-istio-1", "Ready"]
    );
    assert_eq!(row(&table, "kube-system/ds/cilium")[3..5], ["2/2", "ready"]);
    assert_eq!(row(&table, "istio-system/deploy/istiod")[3], "1/1");
    assert_eq!(
        row(&table, "gateways.gateway.networking.k8s.io")[3],
        pin("GATEWAY_API_VERSION")
    );
    assert_eq!(row(&table, "edge/edge-gateway")[3], "203.0.113.10");
    assert_eq!(
        row(&table, "edge/www-tls")[3..5],
        ["expires", "2027-02-28T00:00:00Z"]
    );
    assert_eq!(
        row(&table, "edge/pow-filter")[3],
        "oci://ghcr.io/edgepop/pow-filter@sha256:ab"
    );
}

/// A second edge node without a gateway pod of its own, while another waits for a node: not ok,
/// as the canned answers say; once a pod runs Ready there, ok. A label no node carries: none.
fn assert_each_edge_node_is_served_by_its_own_pod(
    plane: &ControlPlane,
    kubectl: &Path,
    answers: &Path,
    dir: &Path,
) {
    plane.add_node("edge-worker-3", &[pop_common::records::EDGE_NODE_LABEL]);
    add_gateway_pod(plane, "edge-gateway-istio-pending", None);
    let (code, table) = status_real(plane, kubectl, answers, dir, &[]);
    assert_eq!(code, Some(1), "{table}");
    assert_eq!(row_of(&table, "edge-node", "edge-worker-1")[2], "ok");
    let row = row_of(&table, "edge-node", "edge-worker-3");
    assert_eq!(row[2], "NO-GATEWAY", "{table}");
    assert!(
        row[3..]
            .join(" ")
            .starts_with("no gateway pod on it; 1 gateway pod(s) wait for a node: "),
        "{table}"
    );
    add_gateway_pod(plane, "edge-gateway-istio-3", Some("edge-worker-3"));
    plane.kubectl_ok(
        &[
            "-n",
            "edge",
            "delete",
            "pod",
            "edge-gateway-istio-pending",
            "--wait=true",
        ],
        "",
    );
    let (code, table) = status_real(plane, kubectl, answers, dir, &[]);
    assert_eq!(code, Some(0), "{table}");
    assert_eq!(
        row_of(&table, "edge-node", "edge-worker-3")[3..],
        ["gateway", "pod", "edge-gateway-istio-3", "Ready"]
    );

    let names = dir.join("nobody.env");
    fs::write(&names, "EDGE_NODE_LABEL=edge.example.test/serves=yes\n").unwrap();
    let (code, table) = status_real(plane, kubectl, answers, dir, &[("NAMES", &names)]);
    assert_eq!(code, Some(1), "{table}");
    assert_eq!(
        row_of(&table, "edge-node", "edge.example.test/serves=yes")[2],
        "NONE",
        "{table}"
    );
}

/// The backup's CronJob as the platform layer renders it, its status as the CronJob controller
/// writes it: a success, then a later run that did not succeed.
fn assert_the_backup_row_reads_the_cron_job(
    plane: &ControlPlane,
    kubectl: &Path,
    answers: &Path,
    dir: &Path,
) {
    let render = dir.join("backup-render");
    fs::create_dir_all(&render).unwrap();
    crate::etcd_backup_objects::render_with_backup(&render);
    let list: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(render.join("rendered/etcd-backup.json")).unwrap(),
    )
    .unwrap();
    let mut cron_job = testkit::json::element(&list["items"], "/kind", "CronJob").clone();
    // February 30th: the controller manager's CronJob controller never starts a run of its own
    // while the test writes the status.
    cron_job["spec"]["schedule"] = serde_json::json!("0 0 30 2 *");
    plane.kubectl_ok(&["create", "namespace", "etcd-backup"], "");
    plane.kubectl_ok(&["create", "-f", "-"], &cron_job.to_string());
    let what = ["-n", "etcd-backup", "cronjob", "etcd-backup"];
    let name = "etcd-backup/cronjob/etcd-backup";
    let (code, table) = status_real(plane, kubectl, answers, dir, &[]);
    assert_eq!(
        (code, row(&table, name)[2]),
        (Some(1), "PENDING"),
        "{table}"
    );
    set_status(
        plane,
        &what,
        &serde_json::json!({"lastScheduleTime": "2026-12-01T10:23:00Z",
                            "lastSuccessfulTime": "2026-12-01T10:23:41Z"}),
    );
    let (code, table) = status_real(plane, kubectl, answers, dir, &[]);
    assert_eq!(code, Some(0), "{table}");
    assert_eq!(
        row(&table, name)[3..6],
        ["last", "success", "2026-12-01T10:23:41Z"]
    );
    set_status(
        plane,
        &what,
        &serde_json::json!({"lastScheduleTime": "2026-12-01T11:23:00Z"}),
    );
    let (code, table) = status_real(plane, kubectl, answers, dir, &[]);
    assert_eq!(
        (code, row(&table, name)[2]),
        (Some(1), "FAILING"),
        "{table}"
    );
    plane.kubectl_ok(&["delete", "namespace", "etcd-backup", "--wait=true"], "");
}

/// The onprem profile's queries on the same nodes: the StorageClass, Traefik's address.
fn assert_the_onprem_queries_read_the_cluster(plane: &ControlPlane, kubectl: &Path, dir: &Path) {
    let (onprem_answers, names) = onprem(dir);
    let sc = serde_json::json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "ceph-rbd",
                     "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "rbd.csi.ceph.com",
    });
    let svc = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "traefik", "namespace": "traefik"},
        "spec": {"type": "LoadBalancer", "selector": {"app": "traefik"},
                 "ports": [{"name": "websecure", "port": 443}]},
    });
    plane.kubectl_ok(&["create", "-f", "-"], &sc.to_string());
    plane.kubectl_ok(&["create", "-f", "-"], &svc.to_string());
    let profile = Path::new("onprem");
    let env = [("PROFILE", profile), ("NAMES", names.as_path())];
    let (code, table) = status_real(plane, kubectl, &onprem_answers, dir, &env);
    assert_eq!(code, Some(1), "{table}");
    assert_eq!(row(&table, "traefik/svc/traefik")[2], "PENDING", "{table}");
    set_status(
        plane,
        &["-n", "traefik", "service", "traefik"],
        &serde_json::json!({"loadBalancer": {"ingress": [{"ip": "10.20.1.100"}]}}),
    );
    let (code, table) = status_real(plane, kubectl, &onprem_answers, dir, &env);
    assert_eq!(code, Some(0), "{table}");
    assert_eq!(
        row(&table, "traefik/svc/traefik")[3..],
        ["EXTERNAL-IP", "10.20.1.100"]
    );
    assert_eq!(
        row(&table, "storageclass/ceph-rbd")[3..],
        ["default,", "rbd.csi.ceph.com"]
    );
    plane.kubectl_ok(
        &[
            "annotate",
            "storageclass",
            "ceph-rbd",
            "storageclass.kubernetes.io/is-default-class-",
        ],
        "",
    );
    let (_, table) = status_real(plane, kubectl, &onprem_answers, dir, &env);
    assert_eq!(
        row(&table, "storageclass/ceph-rbd")[2],
        "NOT-DEFAULT",
        "{table}"
    );
}

/// What is not ok, made so in the cluster, is told so: a cordoned node, one never reported, a
/// workload gone or unschedulable, a CRD of another version, a certificate not ready.
fn assert_what_is_broken_in_the_cluster_is_not_ok(
    plane: &ControlPlane,
    kubectl: &Path,
    answers: &Path,
    dir: &Path,
) {
    plane.kubectl_ok(&["cordon", "cp-1"], "");
    // A node no kubelet (nor kwok) has reported for: no Ready condition.
    let silent = serde_json::json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "edge-worker-2"}});
    plane.kubectl_ok(&["create", "-f", "-"], &silent.to_string());
    plane.kubectl_ok(
        &["-n", "istio-system", "delete", "deployment", "istiod"],
        "",
    );
    // A Deployment whose pod no node can take.
    plane.kubectl_ok(
        &[
            "-n",
            "cert-manager",
            "delete",
            "deployment",
            "cert-manager-webhook",
        ],
        "",
    );
    plane.kubectl_ok(
        &["create", "-f", "-"],
        &workload("Deployment", "cert-manager", "cert-manager-webhook", "none").to_string(),
    );
    plane.kubectl_ok(
        &[
            "annotate",
            "--overwrite",
            "crd",
            "gateways.gateway.networking.k8s.io",
            "gateway.networking.k8s.io/bundle-version=v1.3.0",
        ],
        "",
    );
    set_certificate(plane, "False");
    plane.kubectl_ok(
        &[
            "delete",
            "crd",
            "wasmplugins.extensions.istio.io",
            "--wait=true",
        ],
        "",
    );
    let (code, table) = status_real(plane, kubectl, answers, dir, &[]);
    assert_eq!(code, Some(1), "{table}");
    for (name, state) in [
        ("cp-1", "CORDONED"),
        ("edge-worker-2", "NOT-READY"),
        ("istio-system/deploy/istiod", "ABSENT"),
        ("cert-manager/deploy/cert-manager-webhook", "DEGRADED"),
        ("gateways.gateway.networking.k8s.io", "DRIFT"),
        ("edge/www-tls", "NOT-READY"),
        ("wasmplugins.extensions.istio.io", "ABSENT"),
    ] {
        assert_eq!(row(&table, name)[2], state, "{name}: {table}");
    }
    assert_eq!(row(&table, "edge-worker-2")[3], "Ready=unknown,", "{table}");
    assert_eq!(
        row(&table, "cert-manager/deploy/cert-manager-webhook")[3],
        "0/1",
        "{table}"
    );
}

/// An API server that does not answer, through the real kubectl (a kubeconfig at a closed
/// loopback port): the edge's cluster is this Makefile's, powered by make up; an on-premises one
/// is not, and its message names the API server and the kubeconfig instead.
#[test]
fn an_api_server_down_is_told_as_the_profile_it_belongs_to() {
    const TEST: &str = "cluster_status_down";
    let Some(kubectl) = testkit::upstream::program(TEST, "kubectl") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let port = testkit::free_port();
    fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: down\n  cluster:\n    server: https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\nusers:\n- name: nobody\n  user: {{}}\ncontexts:\n- name: down\n  context: {{cluster: down, user: nobody}}\ncurrent-context: down\n"
        ),
    )
    .unwrap();
    let (_, names) = onprem(dir.path());
    let tools = [(
        "kubectl",
        format!(
            "#!/usr/bin/env bash\nexec \"{}\" \"$@\"\n",
            kubectl.display()
        ),
    )];
    let tools: Vec<(&str, &str)> = tools.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let answers = dir.path().join("answers");
    let run = |env: &[(&str, &Path)]| {
        script(&tools, &kubeconfig, &answers, dir.path(), env)
            .output()
            .unwrap()
    };
    let edge = run(&[]);
    assert_eq!(
        edge.status.code(),
        Some(2),
        "{}",
        testkit::process::text(&edge)
    );
    assert!(
        String::from_utf8_lossy(&edge.stderr).contains("make up powers the cluster on"),
        "{}",
        testkit::process::text(&edge)
    );
    let profile = Path::new("onprem");
    let onprem = run(&[("PROFILE", profile), ("NAMES", names.as_path())]);
    assert_eq!(
        onprem.status.code(),
        Some(2),
        "{}",
        testkit::process::text(&onprem)
    );
    let stderr = String::from_utf8_lossy(&onprem.stderr);
    assert!(
        stderr.contains("the API server at https://api.demo.k8s.exemple.fr:6443 does not answer")
            && stderr.contains(kubeconfig.to_str().unwrap()),
        "{stderr}"
    );
    assert!(!stderr.contains("make up"), "{stderr}");
    assert!(
        onprem.stdout.is_empty(),
        "{}",
        testkit::process::text(&onprem)
    );
}
