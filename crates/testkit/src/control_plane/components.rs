//! The command line of each program of the control plane, as Talos runs it.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;

use super::pki::{Pki, write_kubeconfig};
use super::{
    KWOK_NODE_ANNOTATION, KWOK_NODE_ANNOTATION_VALUE, POD_CIDR, SERVICE_CIDR, flag, sorted_files,
    write,
};
use crate::free_port;

/// Talos's PodSecurity defaults (pkg/machinery/config/generate/init.go, v1.13.9): baseline
/// enforced, restricted audited and warned, kube-system exempt. The project's patches leave them.
const ADMISSION_CONFIG: &str = "apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1alpha1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      enforce-version: latest
      audit: restricted
      audit-version: latest
      warn: restricted
      warn-version: latest
    exemptions:
      usernames: []
      runtimeClasses: []
      namespaces: [kube-system]
";

/// The `extraArgs` of `cluster.<component>` in the project's control-plane patches
/// (`talos/patches/*.yaml` but the workers' `*.worker.yaml` and `*.each-worker.yaml`, in name
/// order, a later one winning), as flags:
/// the test API server takes what the cluster's does, e.g. the NodePort range.
#[allow(clippy::panic)] // a test helper: a patch it cannot read fails the test, naming it
pub(super) fn talos_extra_args(component: &str) -> Vec<String> {
    let mut args = BTreeMap::new();
    for patch in sorted_files(&crate::workspace::root().join("talos/patches")) {
        let name = patch.file_name().map(|n| n.to_string_lossy().into_owned());
        let for_workers = |n: &str| n.ends_with(".worker.yaml") || n.ends_with(".each-worker.yaml");
        let Some(name) = name.filter(|n| n.ends_with(".yaml") && !for_workers(n)) else {
            continue;
        };
        let text = match fs::read_to_string(&patch) {
            Ok(text) => text,
            Err(err) => panic!("{}: {err}", patch.display()),
        };
        let doc: serde_json::Value = match serde_norway::from_str(&text) {
            Ok(doc) => doc,
            Err(err) => panic!("{name}: not YAML: {err}"),
        };
        let Some(extra) = doc.pointer(&format!("/cluster/{component}/extraArgs")) else {
            continue;
        };
        let Some(extra) = extra.as_object() else {
            panic!("{name}: cluster.{component}.extraArgs is not a map")
        };
        for (key, value) in extra {
            let Some(value) = value.as_str() else {
                panic!("{name}: cluster.{component}.extraArgs.{key} is not a string")
            };
            args.insert(key.clone(), value.to_owned());
        }
    }
    args.into_iter()
        .map(|(key, value)| format!("--{key}={value}"))
        .collect()
}

/// etcd, its data in `<dir>/etcd`, serving clients at `client_url`.
pub(super) fn etcd(program: &Path, dir: &Path, client_url: &str) -> Command {
    let peer_url = format!("http://127.0.0.1:{}", free_port());
    let mut etcd = Command::new(program);
    etcd.arg("--name=edgepop-test")
        .arg(flag("data-dir", &dir.join("etcd")))
        .arg(format!("--listen-client-urls={client_url}"))
        .arg(format!("--advertise-client-urls={client_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=edgepop-test={peer_url}"))
        // The data dies with the test: no fsync (as envtest runs it).
        .arg("--unsafe-no-fsync")
        .arg("--log-level=warn");
    etcd
}

/// Talos v1.13.9 internal/app/machined/pkg/controllers/k8s/control_plane_static_pod.go,
/// manageAPIServer: the same flags, on loopback, without the audit log and encryption.
pub(super) fn apiserver(
    program: &Path,
    dir: &Path,
    pki: &Pki,
    etcd_url: &str,
    port: u16,
) -> Command {
    let server = format!("https://127.0.0.1:{port}");
    let admission = dir.join("admission-control-config.yaml");
    write(&admission, ADMISSION_CONFIG);
    let mut apiserver = Command::new(program);
    apiserver
        .arg(format!("--etcd-servers={etcd_url}"))
        .arg("--bind-address=127.0.0.1")
        .arg("--advertise-address=127.0.0.1")
        .arg(format!("--secure-port={port}"))
        .arg(flag("cert-dir", &dir.join("apiserver")))
        .arg(flag("tls-cert-file", &pki.cert("apiserver")))
        .arg(flag("tls-private-key-file", &pki.key("apiserver")))
        .arg(flag("client-ca-file", &pki.ca))
        .arg(format!("--service-account-issuer={server}"))
        .arg(format!("--api-audiences={server}"))
        .arg(flag(
            "service-account-key-file",
            &pki.service_account_public,
        ))
        .arg(flag(
            "service-account-signing-key-file",
            &pki.service_account_key,
        ))
        .arg(format!("--service-cluster-ip-range={SERVICE_CIDR}"))
        .arg("--authorization-mode=Node,RBAC")
        .arg("--enable-admission-plugins=NodeRestriction")
        .arg(flag("admission-control-config-file", &admission))
        .arg("--allow-privileged=true")
        .arg("--anonymous-auth=false")
        .arg("--enable-bootstrap-token-auth=true")
        .arg("--profiling=false")
        .args(talos_extra_args("apiServer"));
    apiserver
}

/// manageControllerManager, same file: every controller and the token cleaner, node CIDRs
/// allocated from the pod network, per-controller ServiceAccount credentials.
pub(super) fn controller_manager(program: &Path, dir: &Path, server: &str, pki: &Pki) -> Command {
    let mut controller_manager = component(program, dir, server, pki, "kube-controller-manager");
    controller_manager
        .arg("--use-service-account-credentials")
        .arg(flag(
            "service-account-private-key-file",
            &pki.service_account_key,
        ))
        .arg(flag("root-ca-file", &pki.ca))
        .arg(flag("cluster-signing-cert-file", &pki.ca))
        .arg(flag("cluster-signing-key-file", &pki.ca_key))
        .arg("--controllers=*,tokencleaner")
        .arg("--allocate-node-cidrs=true")
        .arg(format!("--cluster-cidr={POD_CIDR}"))
        .arg(format!("--service-cluster-ip-range={SERVICE_CIDR}"))
        .arg("--configure-cloud-routes=false")
        // One instance: nothing to elect, and no wait for a lease.
        .arg("--leader-elect=false")
        .arg("--profiling=false")
        .args(talos_extra_args("controllerManager"));
    controller_manager
}

/// `program`, a component that reaches the API server as `user`: one kubeconfig (written in
/// `dir`) for its own calls and for checking who calls it, its secure port on loopback.
fn component(program: &Path, dir: &Path, server: &str, pki: &Pki, user: &str) -> Command {
    let kubeconfig = dir.join(format!("{user}.kubeconfig"));
    write_kubeconfig(&kubeconfig, server, pki, user);
    let mut command = Command::new(program);
    command
        .arg(flag("kubeconfig", &kubeconfig))
        .arg(flag("authentication-kubeconfig", &kubeconfig))
        .arg(flag("authorization-kubeconfig", &kubeconfig))
        .arg("--bind-address=127.0.0.1")
        .arg(format!("--secure-port={}", free_port()));
    command
}

/// kube-scheduler on loopback, with the patches' `extraArgs`.
pub(super) fn scheduler(program: &Path, dir: &Path, server: &str, pki: &Pki) -> Command {
    let mut scheduler = component(program, dir, server, pki, "kube-scheduler");
    scheduler
        .arg("--leader-elect=false")
        .arg("--profiling=false")
        .args(talos_extra_args("scheduler"));
    scheduler
}

/// kwok, standing in for the kubelets of the nodes it is told to manage (by annotation), with
/// the stages of `stages` (each file a `--config`, in name order).
pub(super) fn kwok(program: &Path, stages: &Path, kubeconfig: &Path) -> Command {
    let mut kwok = Command::new(program);
    kwok.arg(flag("kubeconfig", kubeconfig))
        .arg("--manage-all-nodes=false")
        .arg(format!(
            "--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}"
        ))
        .arg("--node-ip=127.0.0.1")
        .arg("--node-lease-duration-seconds=40");
    for stage in sorted_files(stages) {
        kwok.arg(flag("config", &stage));
    }
    kwok
}
