#![allow(clippy::unwrap_used, clippy::panic)]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pop_common::records::{
    EtcdPlanStep, EtcdSnapshotStatus, EtcdStepKind, KubernetesUpgraded, TalosUpgradeStep,
    TalosUpgraded, UpgradeStepKind,
};

use super::*;
use pop_common::exit::{Exit, Report};
use testkit::process::assert_says_all;

use crate::quorum::{MemberStatus, NodeError, quorum};
use crate::talos::{Kubelet, StaticPod};
use crate::upgrade::{self, Release};

/// A cluster scripted by node name: each member's status answers, in turn (the last one
/// repeats), the member list, and what the calls that change things did.
#[derive(Debug, Default)]
struct Scripted {
    statuses: RefCell<BTreeMap<String, Vec<Result<MemberStatus, NodeError>>>>,
    members: Vec<String>,
    recover_answer: Option<NodeError>,
    snapshot_status: Option<Result<EtcdSnapshotStatus, String>>,
    calls: RefCell<Vec<String>>,
    /// The version each node answers with (an upgrade sets it to its installer's tag).
    versions: RefCell<BTreeMap<String, String>>,
    /// talosctl's own version.
    client: Option<String>,
    /// The Kubernetes nodes that are not Ready (every other one is).
    not_ready: Vec<String>,
    /// The node whose upgrade fails, and how.
    upgrade_fails: Option<(String, NodeError)>,
    /// Nodes that go on answering with their old version after their upgrade.
    stays_behind: Vec<String>,
    /// The Kubernetes nodes (an upgrade-k8s brings every kubelet to its target).
    kubelets: RefCell<Vec<Kubelet>>,
    /// The control planes' static pods as kube-system lists them (an upgrade-k8s brings each
    /// to its target).
    static_pods: RefCell<Vec<StaticPod>>,
    /// The members that left or were removed.
    removed: RefCell<Vec<String>>,
    /// Each node's etcd service state, in turn (the last repeats); `Preparing` when not
    /// scripted. A reset makes its node unreachable once, then `Preparing`.
    services: RefCell<BTreeMap<String, Vec<Result<String, NodeError>>>>,
    /// Nodes that never come back from their reset.
    never_back: Vec<String>,
}

impl Scripted {
    fn status(self, node: &str, answers: Vec<Result<MemberStatus, NodeError>>) -> Self {
        self.statuses.borrow_mut().insert(node.to_owned(), answers);
        self
    }

    fn service(self, node: &str, state: &str) -> Self {
        self.services
            .borrow_mut()
            .insert(node.to_owned(), vec![Ok(state.to_owned())]);
        self
    }
}

/// The next of a node's scripted answers: the last one repeats.
fn next_answer<T: Clone>(answers: &mut Vec<T>) -> T {
    if answers.len() > 1 {
        answers.remove(0)
    } else {
        answers[0].clone()
    }
}

impl Talos for Scripted {
    fn etcd_status(&self, node: &TalosNode) -> Result<MemberStatus, NodeError> {
        self.calls
            .borrow_mut()
            .push(format!("status {}", node.name));
        let mut statuses = self.statuses.borrow_mut();
        next_answer(statuses.get_mut(&node.name).unwrap())
    }
    fn etcd_members(&self, node: &TalosNode) -> Result<Vec<String>, NodeError> {
        self.calls
            .borrow_mut()
            .push(format!("members {}", node.name));
        Ok(self.members.clone())
    }
    fn snapshot(&self, node: &TalosNode, path: &Path) -> Result<(), NodeError> {
        use std::os::unix::fs::OpenOptionsExt as _;
        self.calls
            .borrow_mut()
            .push(format!("snapshot {} {}", node.name, path.display()));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .unwrap();
        Ok(())
    }
    fn recover(&self, node: &TalosNode, snapshot: &Path, skip: bool) -> Result<(), NodeError> {
        self.calls.borrow_mut().push(format!(
            "recover {} {} {skip}",
            node.name,
            snapshot.display()
        ));
        self.recover_answer.clone().map_or(Ok(()), Err)
    }
    fn snapshot_status(&self, _path: &Path) -> Result<EtcdSnapshotStatus, String> {
        self.snapshot_status
            .clone()
            .unwrap_or_else(|| Ok(figures()))
    }
    fn version(&self, node: &TalosNode) -> Result<String, NodeError> {
        self.calls
            .borrow_mut()
            .push(format!("version {}", node.name));
        Ok(self
            .versions
            .borrow()
            .get(&node.name)
            .cloned()
            .unwrap_or_else(|| "v1.13.9".into()))
    }
    fn client_version(&self) -> Result<String, String> {
        Ok(self.client.clone().unwrap_or_else(|| "v1.13.11".into()))
    }
    fn upgrade(&self, node: &TalosNode, installer: &str) -> Result<(), NodeError> {
        self.calls
            .borrow_mut()
            .push(format!("upgrade {} {installer}", node.name));
        if let Some((name, error)) = &self.upgrade_fails
            && *name == node.name
        {
            return Err(error.clone());
        }
        if !self.stays_behind.contains(&node.name) {
            let tag = installer.rsplit(':').next().unwrap().to_owned();
            self.versions.borrow_mut().insert(node.name.clone(), tag);
        }
        Ok(())
    }
    fn node_ready(&self, name: &str) -> Result<bool, NodeError> {
        self.calls.borrow_mut().push(format!("ready {name}"));
        Ok(!self.not_ready.iter().any(|n| n == name))
    }
    fn kubelets(&self) -> Result<Vec<Kubelet>, NodeError> {
        Ok(self.kubelets.borrow().clone())
    }
    fn upgrade_k8s(&self, node: &TalosNode, to: &str) -> Result<(), NodeError> {
        self.calls
            .borrow_mut()
            .push(format!("upgrade-k8s {} {to}", node.name));
        for kubelet in self.kubelets.borrow_mut().iter_mut() {
            kubelet.version = to.to_owned();
        }
        for pod in self.static_pods.borrow_mut().iter_mut() {
            pod.image = format!("registry.k8s.io/{}:{to}", pod.component);
        }
        Ok(())
    }
    fn static_pods(&self) -> Result<Vec<StaticPod>, NodeError> {
        Ok(self.static_pods.borrow().clone())
    }
    /// The members, `i`-th with id `i + 1`, less those removed.
    fn etcd_member_list(&self, node: &TalosNode) -> Result<Vec<talos::Member>, NodeError> {
        self.calls
            .borrow_mut()
            .push(format!("member-list {}", node.name));
        let removed = self.removed.borrow();
        Ok(self
            .members
            .iter()
            .enumerate()
            .filter(|(_, m)| !removed.contains(m))
            .map(|(i, m)| talos::Member {
                id: format!("{:x}", i + 1),
                hostname: m.clone(),
                learner: false,
            })
            .collect())
    }
    fn etcd_leave(&self, node: &TalosNode) -> Result<(), NodeError> {
        self.calls.borrow_mut().push(format!("leave {}", node.name));
        self.removed.borrow_mut().push(node.name.clone());
        Ok(())
    }
    fn etcd_remove_member(&self, through: &TalosNode, id: &str) -> Result<(), NodeError> {
        self.calls
            .borrow_mut()
            .push(format!("remove-member {} {id}", through.name));
        let i = usize::from_str_radix(id, 16).unwrap() - 1;
        self.removed.borrow_mut().push(self.members[i].clone());
        Ok(())
    }
    fn etcd_service_state(&self, node: &TalosNode) -> Result<String, NodeError> {
        self.calls
            .borrow_mut()
            .push(format!("service {}", node.name));
        let mut services = self.services.borrow_mut();
        services
            .get_mut(&node.name)
            .map_or(Ok("Preparing".to_owned()), next_answer)
    }
    fn restart_apiserver(&self, node: &TalosNode) -> Result<(), NodeError> {
        self.calls
            .borrow_mut()
            .push(format!("restart-apiserver {}", node.name));
        Ok(())
    }
    fn reset_ephemeral(&self, node: &TalosNode) -> Result<(), NodeError> {
        self.calls.borrow_mut().push(format!("reset {}", node.name));
        let rebooting = Err(NodeError::Unreachable("connection refused".into()));
        let after = if self.never_back.contains(&node.name) {
            vec![rebooting]
        } else {
            vec![rebooting, Ok("Preparing".to_owned())]
        };
        self.services.borrow_mut().insert(node.name.clone(), after);
        Ok(())
    }
}

#[derive(Debug)]
struct NoSleep;
impl Sleeper for NoSleep {
    fn sleep(&self, _: Duration) {}
}

fn figures() -> EtcdSnapshotStatus {
    EtcdSnapshotStatus {
        hash: "784c5685".into(),
        revision: 3,
        total_keys: 2,
        total_size: 20480,
    }
}

fn healthy(id: &str, leader: &str) -> Result<MemberStatus, NodeError> {
    Ok(MemberStatus {
        member_id: id.into(),
        leader: leader.into(),
        learner: false,
        errors: Vec::new(),
    })
}

fn no_leader(id: &str) -> Result<MemberStatus, NodeError> {
    Ok(MemberStatus {
        member_id: id.into(),
        leader: "0000000000000000".into(),
        learner: false,
        errors: vec!["etcdserver: no leader".into()],
    })
}

fn etcd_down() -> Result<MemberStatus, NodeError> {
    Err(NodeError::Answered {
        code: "Unknown".into(),
        message:
            "failed to create etcd client: error building etcd client: context deadline exceeded"
                .into(),
    })
}

fn down() -> Result<MemberStatus, NodeError> {
    Err(NodeError::Unreachable("connection refused".into()))
}

const CPS: [&str; 3] = ["edge-par-cp-1", "edge-par-cp-2", "edge-par-cp-3"];

fn inventory() -> String {
    let node = |name: &str, role: &str, ip: &str| {
        format!(
            r#"{{"name":"{name}","role":"{role}","kind":"instance","zone":"fr-par-1",
            "id":"11111111-1111-4111-8111-11111111111{}","public_ipv4":"{ip}","public_ipv6":null,
            "private_ipv4":null,"steps":{{}}}}"#,
            ip.chars().last().unwrap()
        )
    };
    format!(
        r#"{{"kind":"NodeInventory","version":2,"cluster_name":"edge-par",
        "cluster_endpoint":"https://api.example.com:6443","ssh_key_ids":[],"nodes":[{},{},{},{}]}}"#,
        node("edge-par-worker-1", "worker", "203.0.113.10"),
        node(CPS[0], "controlplane", "203.0.113.11"),
        node(CPS[1], "controlplane", "203.0.113.12"),
        node(CPS[2], "controlplane", "203.0.113.13"),
    )
}

fn config(action: Action, dry_run: bool) -> Config {
    Config {
        action,
        programs: Programs {
            talosctl: "talosctl".into(),
            etcdutl: "etcdutl".into(),
            talosconfig: "talosconfig".into(),
            kubectl: "kubectl".into(),
            kubeconfig: "kubeconfig".into(),
        },
        talos_port: 50000,
        dry_run,
    }
}

fn snapshot_config(out_dir: &Path, dry_run: bool) -> Config {
    config(
        Action::Snapshot {
            out_dir: out_dir.to_path_buf(),
        },
        dry_run,
    )
}

fn restore_action(snapshot: &str) -> Action {
    Action::Restore {
        snapshot: PathBuf::from(snapshot),
        skip_hash_check: false,
        reset_ephemeral: false,
        wait_tries: 3,
        wait_interval_seconds: 1,
    }
}

/// A restore that resets the control planes holding etcd data first.
fn restore_resetting(snapshot: &str) -> Action {
    match restore_action(snapshot) {
        Action::Restore {
            snapshot,
            skip_hash_check,
            wait_tries,
            wait_interval_seconds,
            ..
        } => Action::Restore {
            snapshot,
            skip_hash_check,
            reset_ephemeral: true,
            wait_tries,
            wait_interval_seconds,
        },
        _ => unreachable!(),
    }
}

/// 2026-06-19T17:00:00Z.
const NOW: u64 = 1_781_888_400;

fn go(config: &Config, talos: &Scripted) -> (Result<(), Error>, String) {
    go_on(config, talos, &inventory())
}

/// [`go`], which must succeed: what the run wrote.
fn go_ok(config: &Config, talos: &Scripted) -> String {
    let (result, out) = go(config, talos);
    result.unwrap();
    out
}

/// [`go`] on another inventory.
fn go_on(config: &Config, talos: &Scripted, inventory: &str) -> (Result<(), Error>, String) {
    let mut out = Vec::new();
    let result = run_with(config, talos, &NoSleep, NOW, inventory.as_bytes(), &mut out);
    (result, String::from_utf8(out).unwrap())
}

/// A run's error, which must be of the kind `exit`: its message.
fn error_of(result: Result<(), Error>, exit: Exit) -> String {
    let error = result.unwrap_err();
    assert_eq!(error.exit(), exit, "{error}");
    error.to_string()
}

/// A run that must fail (exit 1), every needle in its message.
fn fails_saying(result: Result<(), Error>, needles: &[&str]) {
    assert_says_all(&error_of(result, Exit::Failure), needles);
}

/// Whether a recovery was asked of any node.
/// How many times `node`'s member was asked for its status.
fn status_reads(talos: &Scripted, node: &str) -> usize {
    let asked = format!("status {node}");
    talos.calls.borrow().iter().filter(|c| **c == asked).count()
}

fn recovered(talos: &Scripted) -> bool {
    talos
        .calls
        .borrow()
        .iter()
        .any(|c| c.starts_with("recover"))
}

fn plan_lines(out: &str) -> Vec<EtcdPlanStep> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_snapshot_is_named_after_the_cluster_and_the_utc_time() {
    assert_eq!(
        snapshot_path(Path::new("talos/_out/etcd"), "edge-par", NOW),
        PathBuf::from("talos/_out/etcd/edge-par-20260619T170000Z.snapshot")
    );
}

#[test]
fn the_quorum_is_a_majority_of_the_members_following_one_leader() {
    let node = |name: &str| TalosNode {
        name: name.into(),
        endpoint: format!("{name}:50000"),
        address: name.into(),
    };
    let seen = |answers: Vec<Result<MemberStatus, NodeError>>| -> Vec<Observed> {
        answers
            .into_iter()
            .zip(CPS)
            .map(|(status, name)| Observed {
                node: node(name),
                status,
            })
            .collect()
    };
    let all = seen(vec![
        healthy("a", "a"),
        healthy("b", "a"),
        healthy("c", "a"),
    ]);
    assert!(matches!(quorum(&all, 3), Quorum::Healthy { ref healthy, .. } if healthy.len() == 3));
    // One member down: two of three still make a quorum.
    let one_down = seen(vec![down(), healthy("b", "b"), healthy("c", "b")]);
    assert!(matches!(quorum(&one_down, 3), Quorum::Healthy { ref leader, .. } if leader == "b"));
    // Two down: the last one has no leader.
    let two_down = seen(vec![down(), etcd_down(), no_leader("c")]);
    assert_eq!(
        quorum(&two_down, 3),
        Quorum::Lost {
            healthy: 0,
            members: 3
        }
    );
    // Two members that each follow another leader are not a majority of one.
    let split = seen(vec![healthy("a", "a"), healthy("b", "b"), down()]);
    assert!(matches!(quorum(&split, 3), Quorum::Lost { healthy: 1, .. }));
    // A member list longer than the control planes (a stale member) raises the majority.
    let two_of_five = seen(vec![healthy("a", "a"), healthy("b", "a"), down()]);
    assert!(matches!(
        quorum(&two_of_five, 5),
        Quorum::Lost {
            healthy: 2,
            members: 5
        }
    ));
    // A learner does not vote.
    let learner = seen(vec![
        Ok(MemberStatus {
            learner: true,
            ..healthy("a", "b").unwrap()
        }),
        healthy("b", "b"),
        down(),
    ]);
    assert!(matches!(
        quorum(&learner, 3),
        Quorum::Lost { healthy: 1, .. }
    ));
}

#[test]
fn a_snapshot_plan_streams_from_the_first_healthy_member_and_changes_nothing_in_dry_run() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("etcd");
    let talos = Scripted::default()
        .status(CPS[0], vec![etcd_down()])
        .status(CPS[1], vec![healthy("b", "c")])
        .status(CPS[2], vec![healthy("c", "c")]);
    let out = go_ok(&snapshot_config(&out_dir, true), &talos);
    let steps = plan_lines(&out);
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0].step, EtcdStepKind::TakeSnapshot);
    assert_eq!(steps[0].node.as_deref(), Some(CPS[1]));
    assert_eq!(steps[0].endpoint.as_deref(), Some("203.0.113.12:50000"));
    assert!(
        steps[0].says.contains("edge-par-20260619T170000Z.snapshot"),
        "{}",
        steps[0].says
    );
    assert_eq!(steps[1].step, EtcdStepKind::CheckSnapshot);
    assert!(!out_dir.exists(), "a dry run made the folder");
    assert!(talos.calls.borrow().iter().all(|c| c.starts_with("status")));
}

#[test]
fn a_snapshot_is_written_0600_in_a_0700_folder_and_recorded() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("etcd");
    let talos = Scripted::default()
        .status(CPS[0], vec![healthy("a", "a")])
        .status(CPS[1], vec![healthy("b", "a")])
        .status(CPS[2], vec![healthy("c", "a")]);
    let out = go_ok(&snapshot_config(&out_dir, false), &talos);
    let record: pop_common::records::EtcdSnapshot = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(record.node, CPS[0]);
    assert_eq!(record.taken_at, "2026-06-19T17:00:00Z");
    assert_eq!(record.status, figures());
    assert_eq!(
        record.path,
        out_dir.join("edge-par-20260619T170000Z.snapshot")
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&out_dir), 0o700);
    assert_eq!(mode(&record.path), 0o600);
    // The same second again: refused, the first one kept.
    let (again, _) = go(&config(Action::Snapshot { out_dir }, false), &talos);
    assert!(
        matches!(again, Err(Error::File { ref message, .. }) if message.contains("exists already"))
    );
}

#[test]
fn no_snapshot_without_a_member_that_has_a_leader() {
    let talos = Scripted::default()
        .status(CPS[0], vec![down()])
        .status(CPS[1], vec![etcd_down()])
        .status(CPS[2], vec![no_leader("c")]);
    let dir = tempfile::tempdir().unwrap();
    let (result, out) = go(
        &config(
            Action::Snapshot {
                out_dir: dir.path().into(),
            },
            false,
        ),
        &talos,
    );
    let text = error_of(result, Exit::Failure);
    for said in [
        "edge-par-cp-1: the Talos API does not answer",
        "context deadline exceeded",
        "etcdserver: no leader",
    ] {
        assert!(text.contains(said), "{said}: {text}");
    }
    assert!(out.is_empty());
}

#[test]
fn a_restore_is_refused_while_a_majority_follows_a_leader_naming_them() {
    let talos = Scripted {
        members: CPS.iter().map(|s| (*s).to_owned()).collect(),
        ..Scripted::default()
    }
    .status(CPS[0], vec![down()])
    .status(CPS[1], vec![healthy("b", "c")])
    .status(CPS[2], vec![healthy("c", "c")]);
    for dry_run in [true, false] {
        let (result, out) = go(&config(restore_action("s.snapshot"), dry_run), &talos);
        let text = error_of(result, Exit::Failure);
        assert!(
            text.contains("2 of 3 members follow leader c (edge-par-cp-2, edge-par-cp-3)"),
            "{text}"
        );
        assert!(out.is_empty());
    }
    assert!(!recovered(&talos));
}

#[test]
fn a_restore_is_refused_when_a_later_read_shows_an_election_was_only_under_way() {
    // The first read falls in an election: no member has a leader. The next shows two of three
    // following one: the cluster works, and nothing is recovered.
    let talos = Scripted {
        members: CPS.iter().map(|s| (*s).to_owned()).collect(),
        ..Scripted::default()
    }
    .status(CPS[0], vec![no_leader("a"), healthy("a", "b")])
    .status(CPS[1], vec![no_leader("b"), healthy("b", "b")])
    .status(CPS[2], vec![down()]);
    let (result, out) = go(&config(restore_action("s.snapshot"), false), &talos);
    let text = result.unwrap_err().to_string();
    assert!(
        text.contains("2 of 3 members follow leader b (edge-par-cp-1, edge-par-cp-2)"),
        "{text}"
    );
    assert!(out.is_empty());
    assert!(!recovered(&talos));
    let reads = status_reads(&talos, CPS[0]);
    assert_eq!(reads, 2);
}

#[test]
fn a_restore_reads_the_members_three_times_before_it_believes_the_quorum_lost() {
    let talos = Scripted::default()
        .status(CPS[0], vec![no_leader("a")])
        .status(CPS[1], vec![down()])
        .status(CPS[2], vec![down()]);
    go_ok(&config(restore_action("s.snapshot"), true), &talos);
    let reads = status_reads(&talos, CPS[0]);
    assert_eq!(reads, run::QUORUM_LOSS_READS.tries as usize);
}

#[test]
fn a_snapshot_etcdutl_refuses_stops_the_restore_before_any_node_is_asked() {
    let talos = Scripted {
        snapshot_status: Some(Err("snapshot file integrity check failed".into())),
        ..Scripted::default()
    };
    let (result, _) = go(&config(restore_action("bad.snapshot"), false), &talos);
    let said = error_of(result, Exit::Usage);
    assert!(
        said.starts_with("bad.snapshot: refused by etcdutl"),
        "{said}"
    );
    assert!(talos.calls.borrow().is_empty());
}

#[test]
fn a_lost_quorum_is_recovered_on_the_first_node_talos_answers_for_then_waited_for() {
    let talos = Scripted::default()
        .status(CPS[0], vec![down()])
        .status(CPS[1], vec![etcd_down(), etcd_down(), healthy("9f", "9f")])
        .status(CPS[2], vec![no_leader("c")]);
    let out = go_ok(&config(restore_action("s.snapshot"), true), &talos);
    let steps = plan_lines(&out);
    let kinds: Vec<_> = steps.iter().map(|s| s.step).collect();
    assert_eq!(
        kinds,
        [
            EtcdStepKind::CheckSnapshot,
            EtcdStepKind::Recover,
            EtcdStepKind::WaitHealthy,
            EtcdStepKind::RestartApiserver,
            EtcdStepKind::RestartApiserver,
        ]
    );
    // The API servers of the control planes that answer, not of the one gone.
    assert_eq!(steps[3].node.as_deref(), Some(CPS[1]));
    assert_eq!(steps[4].node.as_deref(), Some(CPS[2]));
    assert!(
        steps[3].says.contains(
            "talosctl restart -k kube-system/kube-apiserver-edge-par-cp-2:kube-apiserver"
        ),
        "{}",
        steps[3].says
    );
    assert_eq!(steps[1].node.as_deref(), Some(CPS[1]));
    assert!(steps[1].says.contains("revision 3"), "{}", steps[1].says);
    assert!(!recovered(&talos));

    let out = go_ok(&config(restore_action("s.snapshot"), false), &talos);
    let record: pop_common::records::EtcdRecovery = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(record.node, CPS[1]);
    assert_eq!(record.member_id, "9f");
    assert!(
        talos
            .calls
            .borrow()
            .contains(&format!("recover {} s.snapshot false", CPS[1]))
    );
}

#[test]
fn a_node_whose_etcd_folder_holds_data_is_refused_with_talos_words_and_the_way_out() {
    let talos = Scripted {
        recover_answer: Some(NodeError::Answered {
            code: "AlreadyExists".into(),
            message: "etcd data directory is not empty".into(),
        }),
        ..Scripted::default()
    }
    .status(CPS[0], vec![no_leader("a")])
    .status(CPS[1], vec![down()])
    .status(CPS[2], vec![down()]);
    let (result, out) = go(&config(restore_action("s.snapshot"), false), &talos);
    let text = result.unwrap_err().to_string();
    assert_says_all(
        &text,
        &[
            "edge-par-cp-1: bootstrap --recover-from: Talos answered AlreadyExists: etcd data directory is not empty",
            "--system-labels-to-wipe=EPHEMERAL",
        ],
    );
    assert!(out.is_empty());
}

/// cp-1 runs its member without a leader, cp-2 answers with a broken etcd whose data is there,
/// cp-3 is gone: the lost quorum of a cluster whose members still hold data.
fn members_holding_data() -> Scripted {
    Scripted::default()
        .status(
            CPS[0],
            vec![
                no_leader("a"),
                no_leader("a"),
                no_leader("a"),
                healthy("a", "a"),
            ],
        )
        .status(CPS[1], vec![etcd_down()])
        .status(CPS[2], vec![down()])
        .service(CPS[0], "Running")
        .service(CPS[1], "Failed")
}

#[test]
fn control_planes_holding_etcd_data_refuse_the_restore_before_anything_changes() {
    for dry_run in [true, false] {
        let talos = members_holding_data();
        let (result, out) = go(&config(restore_action("s.snapshot"), dry_run), &talos);
        fails_saying(
            result,
            &[
                "edge-par-cp-1 (its etcd service is Running), edge-par-cp-2 (its etcd service is Failed): etcd data is still there",
                "--reset-ephemeral",
                "RESET_EPHEMERAL=yes",
                "--system-labels-to-wipe=EPHEMERAL",
                "nothing was done",
            ],
        );
        assert!(out.is_empty());
        let calls = talos.calls.borrow();
        assert!(
            !calls
                .iter()
                .any(|c| c.starts_with("reset") || c.starts_with("recover")),
            "{calls:?}"
        );
        // The gone node is not asked for its service.
        assert!(!calls.contains(&format!("service {}", CPS[2])), "{calls:?}");
    }
}

#[test]
fn reset_ephemeral_wipes_the_members_holding_data_waits_for_them_then_recovers() {
    let talos = members_holding_data();
    let steps = plan_lines(&go_ok(
        &config(restore_resetting("s.snapshot"), true),
        &talos,
    ));
    let plan: Vec<_> = steps
        .iter()
        .map(|s| (s.step, s.node.clone().unwrap_or_default()))
        .collect();
    use EtcdStepKind::{
        CheckSnapshot, Recover, ResetEphemeral, RestartApiserver, WaitHealthy, WaitPreparing,
    };
    let cp = |i: usize| CPS[i].to_owned();
    assert_eq!(
        plan,
        [
            (CheckSnapshot, String::new()),
            (ResetEphemeral, cp(0)),
            (ResetEphemeral, cp(1)),
            (WaitPreparing, cp(0)),
            (WaitPreparing, cp(1)),
            (Recover, cp(0)),
            (WaitHealthy, cp(0)),
            (RestartApiserver, cp(0)),
            (RestartApiserver, cp(1)),
        ]
    );
    assert!(
        steps[1].says.contains("its etcd service is Running"),
        "{}",
        steps[1].says
    );
    assert!(!talos.calls.borrow().iter().any(|c| c.starts_with("reset")));

    let talos = members_holding_data();
    let out = go_ok(&config(restore_resetting("s.snapshot"), false), &talos);
    let record: pop_common::records::EtcdRecovery = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(record.node, CPS[0]);
    let calls = talos.calls.borrow();
    let acted: Vec<&str> = calls
        .iter()
        .map(String::as_str)
        .filter(|c| {
            ["service", "reset", "recover", "restart"]
                .iter()
                .any(|a| c.starts_with(a))
        })
        .collect();
    assert_eq!(
        acted,
        [
            "service edge-par-cp-1",
            "service edge-par-cp-2",
            "reset edge-par-cp-1",
            "reset edge-par-cp-2",
            // Each is asked until it is back from its reboot.
            "service edge-par-cp-1",
            "service edge-par-cp-1",
            "service edge-par-cp-2",
            "service edge-par-cp-2",
            "recover edge-par-cp-1 s.snapshot false",
            // Then each API server that may hold a cache of the lost state, in turn.
            "restart-apiserver edge-par-cp-1",
            "restart-apiserver edge-par-cp-2",
        ]
    );
}

#[test]
fn a_control_plane_that_never_comes_back_from_its_reset_stops_the_restore_before_the_recovery() {
    let talos = Scripted {
        never_back: vec![CPS[1].to_owned()],
        ..members_holding_data()
    };
    let (result, _) = go(&config(restore_resetting("s.snapshot"), false), &talos);
    fails_saying(
        result,
        &[
            "edge-par-cp-2: not back with its etcd service Preparing within 3 looks",
            "the Talos API does not answer",
        ],
    );
    assert!(!recovered(&talos));
}

#[test]
fn a_member_that_never_comes_back_fails_after_its_bounded_wait() {
    let talos = Scripted::default()
        .status(CPS[0], vec![etcd_down()])
        .status(CPS[1], vec![down()])
        .status(CPS[2], vec![down()]);
    let (result, _) = go(&config(restore_action("s.snapshot"), false), &talos);
    let error = result.unwrap_err();
    assert!(matches!(error, Error::NotBack { tries: 3, .. }), "{error}");
    // Asked at each of the gate's reads, then three times while waiting.
    let asked = status_reads(&talos, CPS[0]);
    assert_eq!(asked, run::QUORUM_LOSS_READS.tries as usize + 3);
}

#[test]
fn talosctl_tables_and_errors_are_read_as_talosctl_prints_them() {
    // Printed by the real talosctl v1.13.9 against the node stand-in.
    let status = "MEMBER             DB SIZE   IN USE           LEADER             RAFT INDEX   RAFT TERM   RAFT APPLIED INDEX   LEARNER   PROTOCOL   STORAGE   ERRORS\n\
                  56b6861ce0e011c0   20 kB     16 kB (80.00%)   56b6861ce0e011c0   4            2           4                    false     3.6.12     3.6.0     \n";
    let service = "NODE     127.0.0.4\nID       etcd\nSTATE    Running\nHEALTH   OK\n\
                   EVENTS   [Running]: Health check successful (0s ago)\n";
    assert_eq!(talos::parse_service_state(service).unwrap(), "Running");
    assert!(talos::parse_service_state("NODE     127.0.0.4\nID       etcd\n").is_err());
    let read = talos::parse_status(status).unwrap();
    assert_eq!(read.member_id, "56b6861ce0e011c0");
    assert!(read.healthy());
    let members = "ID                 HOSTNAME   PEER URLS                CLIENT URLS              LEARNER\n\
                   56b6861ce0e011c0   cp-1       http://127.0.0.2:24002   http://127.0.0.2:24001   false\n";
    assert_eq!(talos::parse_members(members).unwrap(), ["cp-1"]);
    assert_eq!(
        talos::node_error(
            "error getting status: rpc error: code = Unknown desc = failed to create etcd client: x\n"
        ),
        NodeError::Answered {
            code: "Unknown".into(),
            message: "failed to create etcd client: x".into()
        }
    );
    assert!(matches!(
        talos::node_error(
            "1 error occurred:\n\t* 10.0.0.1: rpc error: code = Unavailable desc = connection error\n"
        ),
        NodeError::Unreachable(_)
    ));
    let figures = talos::parse_snapshot_status(
        r#"{"hash":2018268805,"revision":3,"totalKey":2,"totalSize":20480,"version":"3.6.0"}"#,
    )
    .unwrap();
    assert_eq!(figures, super::tests::figures());
}

#[test]
fn an_inventory_without_a_control_plane_or_its_address_is_bad_input() {
    let talos = Scripted::default();
    let restore = config(restore_action("s"), true);
    let no_cp = inventory().replace("controlplane", "worker");
    let (result, _) = go_on(&restore, &talos, &no_cp);
    let said = error_of(result, Exit::Usage);
    assert!(said.contains("field `nodes`: no control plane"), "{said}");
    let no_ip = inventory().replace(r#""public_ipv4":"203.0.113.12""#, r#""public_ipv4":null"#);
    let (result, _) = go_on(&restore, &talos, &no_ip);
    let said = result.unwrap_err().to_string();
    assert!(said.contains("nodes[2].public_ipv4"), "{said}");
}

const CP_INSTALLER: &str = "factory.talos.dev/scaleway-installer/3765:v1.13.11";
const WORKER_INSTALLER: &str = "factory.talos.dev/metal-installer/b4f8:v1.13.11";
const WORKER: &str = "edge-par-worker-1";

/// The snapshot into `out_dir`, three looks at an upgraded node.
#[test]
fn a_node_on_the_target_left_cordoned_is_named_even_when_nothing_is_left_to_upgrade() {
    // A run stopped between talosctl's drain and its uncordon: the worker runs the target,
    // its Kubernetes node still cordoned. A rerun would skip it and leave it so.
    let talos = Scripted {
        versions: RefCell::new(
            CPS.iter()
                .chain([&WORKER])
                .map(|n| ((*n).to_owned(), "v1.13.11".to_owned()))
                .collect(),
        ),
        ..kubelets_at("v1.36.3")
    };
    talos.kubelets.borrow_mut()[3].cordoned = true;
    for dry_run in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let (result, out) = go(&upgrade_config(dir.path(), dry_run), &talos);
        let said = error_of(result, Exit::Usage);
        assert!(
            said.contains(
                "edge-par-worker-1 runs v1.13.11 already, but its Kubernetes node is cordoned"
            ),
            "{said}"
        );
        assert!(
            said.contains("kubectl uncordon edge-par-worker-1"),
            "{said}"
        );
        assert!(out.is_empty(), "{out}");
    }
    assert!(upgrades(&talos).is_empty());

    // Uncordoned: nothing to do.
    talos.kubelets.borrow_mut()[3].cordoned = false;
    let dir = tempfile::tempdir().unwrap();
    assert!(go_ok(&upgrade_config(dir.path(), false), &talos).is_empty());
}

fn quick_run(out_dir: &Path) -> UpgradeRun {
    UpgradeRun {
        out_dir: out_dir.to_path_buf(),
        wait_tries: 3,
        wait_interval_seconds: 1,
    }
}

fn upgrade_config(out_dir: &Path, dry_run: bool) -> Config {
    config(
        Action::Upgrade {
            to: "v1.13.11".into(),
            control_plane_installer: CP_INSTALLER.into(),
            worker_installer: WORKER_INSTALLER.into(),
            run: quick_run(out_dir),
        },
        dry_run,
    )
}

/// Three healthy members under cp-1, and a worker.
fn healthy_cluster() -> Scripted {
    Scripted {
        members: CPS.iter().map(|n| (*n).to_owned()).collect(),
        ..Scripted::default()
    }
    .status(CPS[0], vec![healthy("a", "a")])
    .status(CPS[1], vec![healthy("b", "a")])
    .status(CPS[2], vec![healthy("c", "a")])
}

fn upgrade_lines(out: &str) -> Vec<TalosUpgradeStep> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The calls that change a node, in order.
fn upgrades(talos: &Scripted) -> Vec<String> {
    talos
        .calls
        .borrow()
        .iter()
        .filter(|c| c.starts_with("upgrade") || c.starts_with("snapshot"))
        .map(|c| c.split(' ').take(2).collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn talos_versions_are_read_and_only_the_same_or_the_next_minor_is_a_path() {
    let v = |t: &str| Release::parse(t).unwrap();
    assert_eq!(v("v1.13.11").to_string(), "v1.13.11");
    assert_eq!(v("1.14.0-rc.1").to_string(), "v1.14.0-rc.1");
    assert!(v("v1.14.0-rc.1") < v("v1.14.0"));
    assert!(v("v1.13.9") < v("v1.13.11"));
    for bad in ["", "v1.13", "v1.13.x", "v1.13.1.2", "v1.13.1-", "latest"] {
        assert_eq!(Release::parse(bad), None, "{bad}");
    }
    assert_eq!(upgrade::check_path(&v("v1.13.9"), &v("v1.13.11")), Ok(()));
    assert_eq!(upgrade::check_path(&v("v1.13.11"), &v("v1.13.11")), Ok(()));
    assert_eq!(upgrade::check_path(&v("v1.13.11"), &v("v1.14.0")), Ok(()));
    assert!(matches!(
        upgrade::check_path(&v("v1.12.6"), &v("v1.14.0")),
        Err(upgrade::PathRefusal::TooFar { .. })
    ));
    assert!(matches!(
        upgrade::check_path(&v("v1.13.11"), &v("v2.0.0")),
        Err(upgrade::PathRefusal::TooFar { .. })
    ));
    assert!(matches!(
        upgrade::check_path(&v("v1.13.11"), &v("v1.13.9")),
        Err(upgrade::PathRefusal::Downgrade { .. })
    ));
}

#[test]
fn each_kind_of_node_gets_its_own_platforms_installer_at_the_target() {
    let to = Release::parse("v1.13.11").unwrap();
    assert_eq!(
        upgrade::check_installer(CP_INSTALLER, NodeRole::Controlplane, &to),
        Ok(())
    );
    assert_eq!(
        upgrade::check_installer(WORKER_INSTALLER, NodeRole::Worker, &to),
        Ok(())
    );
    // The metal installer (talosctl's default profile) on a Scaleway control plane.
    let wrong = upgrade::check_installer(WORKER_INSTALLER, NodeRole::Controlplane, &to);
    assert!(wrong.unwrap_err().contains("not a scaleway-installer"));
    let stale = "factory.talos.dev/metal-installer/b4f8:v1.13.9";
    let wrong = upgrade::check_installer(stale, NodeRole::Worker, &to);
    assert!(wrong.unwrap_err().contains("not tagged v1.13.11"));
}

#[test]
fn an_upgrade_plan_snapshots_first_then_takes_the_control_planes_one_by_one_then_the_worker() {
    let dir = tempfile::tempdir().unwrap();
    let talos = healthy_cluster();
    let out = go_ok(&upgrade_config(dir.path(), true), &talos);
    let steps = upgrade_lines(&out);
    let shape: Vec<(UpgradeStepKind, Option<&str>)> =
        steps.iter().map(|s| (s.step, s.node.as_deref())).collect();
    use UpgradeStepKind::*;
    let mut expected = vec![
        (Preflight, None),
        (TakeSnapshot, None),
        (CheckSnapshot, None),
    ];
    for node in [CPS[0], CPS[1], CPS[2], WORKER] {
        expected.extend([
            (Gate, Some(node)),
            (Upgrade, Some(node)),
            (WaitUpgraded, Some(node)),
        ]);
    }
    assert_eq!(shape, expected);
    assert_eq!(
        steps.iter().map(|s| s.n).collect::<Vec<_>>(),
        (1..=steps.len()).collect::<Vec<_>>()
    );
    let says = |node: &str, kind| {
        steps
            .iter()
            .find(|s| s.node.as_deref() == Some(node) && s.step == kind)
            .unwrap()
            .says
            .clone()
    };
    assert!(says(CPS[0], Upgrade).contains(&format!("--image {CP_INSTALLER}")));
    assert!(says(WORKER, Upgrade).contains(&format!("--image {WORKER_INSTALLER}")));
    assert!(says(WORKER, Upgrade).contains("EDGE DOWNTIME"));
    assert!(!says(CPS[1], Upgrade).contains("EDGE DOWNTIME"));
    // Each control plane through its own apid; the worker through the first control plane's,
    // which serves the kubeconfig talosctl's drain fetches from its endpoint.
    let endpoint = |node: &str| {
        let step = steps.iter().find(|s| s.node.as_deref() == Some(node));
        step.and_then(|s| s.endpoint.clone())
    };
    assert_eq!(endpoint(CPS[1]).as_deref(), Some("203.0.113.12:50000"));
    assert_eq!(endpoint(WORKER).as_deref(), Some("203.0.113.11:50000"));
    assert!(steps[0].says.contains("edge-par-cp-1 v1.13.9"));
    assert!(steps[1].says.contains("edge-par-20260619T170000Z.snapshot"));
    // A dry run changes nothing, and leaves no file.
    assert!(upgrades(&talos).is_empty());
    assert!(
        !dir.path()
            .join("edge-par-20260619T170000Z.snapshot")
            .exists()
    );
}

#[test]
fn an_upgrade_runs_in_the_planned_order_and_records_each_node() {
    let dir = tempfile::tempdir().unwrap();
    let talos = healthy_cluster();
    let out = go_ok(&upgrade_config(dir.path(), false), &talos);
    let snapshot = dir.path().join("edge-par-20260619T170000Z.snapshot");
    assert_eq!(
        upgrades(&talos),
        [
            format!("snapshot {}", CPS[0]),
            format!("upgrade {}", CPS[0]),
            format!("upgrade {}", CPS[1]),
            format!("upgrade {}", CPS[2]),
            format!("upgrade {WORKER}"),
        ]
    );
    assert!(snapshot.is_file());
    let lines: Vec<serde_json::Value> = testkit::process::json_lines(&out);
    assert_eq!(lines[0]["kind"], "EtcdSnapshot");
    let records: Vec<TalosUpgraded> = lines[1..]
        .iter()
        .map(|l| serde_json::from_value(l.clone()).unwrap())
        .collect();
    let nodes: Vec<&str> = records.iter().map(|r| r.node.as_str()).collect();
    assert_eq!(nodes, [CPS[0], CPS[1], CPS[2], WORKER]);
    assert!(
        records
            .iter()
            .all(|r| r.from == "v1.13.9" && r.to == "v1.13.11")
    );
    assert_eq!(records[3].installer, WORKER_INSTALLER);
    assert_eq!(records[0].installer, CP_INSTALLER);
    // Each upgrade came after its gate read every member and every node's readiness.
    let calls = talos.calls.borrow();
    let at = |call: &str| calls.iter().position(|c| c.starts_with(call)).unwrap();
    assert!(at(&format!("ready {WORKER}")) < at(&format!("upgrade {}", CPS[0])));
}

/// An upgrade on `talos` refused at its gate saying `needle`, no node's upgrade started.
fn assert_no_upgrade_starts(talos: &Scripted, needle: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (result, _) = go(&upgrade_config(dir.path(), false), talos);
    let said = result.unwrap_err().to_string();
    assert!(said.contains(needle), "{said}");
    assert!(!upgrades(talos).iter().any(|c| c.starts_with("upgrade")));
}

#[test]
fn no_upgrade_starts_while_another_member_is_unhealthy_or_a_node_is_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    // cp-3's member has lost its leader: two of three still hold the quorum (a snapshot can be
    // taken), but one more reboot would lose it.
    let talos = healthy_cluster().status(CPS[2], vec![no_leader("c")]);
    let (result, _) = go(&upgrade_config(dir.path(), false), &talos);
    fails_saying(
        result,
        &[
            "before upgrading edge-par-cp-1",
            "nothing was started on edge-par-cp-1",
            "edge-par-cp-3: member c reports etcdserver: no leader",
        ],
    );
    assert_eq!(upgrades(&talos), [format!("snapshot {}", CPS[0])]);

    // A member missing from the list (two members for three control planes).
    let talos = Scripted {
        members: vec![CPS[0].into(), CPS[1].into()],
        ..healthy_cluster()
    };
    assert_no_upgrade_starts(&talos, "etcd lists 2 members");

    // The worker not Ready: nothing starts either.
    let talos = Scripted {
        not_ready: vec![WORKER.into()],
        ..healthy_cluster()
    };
    assert_no_upgrade_starts(
        &talos,
        "edge-par-worker-1: its Kubernetes node is not Ready",
    );
}

#[test]
fn a_run_cut_short_at_a_node_resumes_at_that_node() {
    let dir = tempfile::tempdir().unwrap();
    let talos = Scripted {
        upgrade_fails: Some((
            CPS[1].into(),
            NodeError::Unreachable("connection refused".into()),
        )),
        ..healthy_cluster()
    };
    let (result, _) = go(&upgrade_config(dir.path(), false), &talos);
    let said = result.unwrap_err().to_string();
    assert!(said.contains("edge-par-cp-2: talosctl upgrade"), "{said}");
    assert_eq!(talos.versions.borrow()[CPS[0]], "v1.13.11");

    // The rerun reads every version first: cp-1 is skipped, cp-2 is where it starts.
    let talos = Scripted {
        upgrade_fails: None,
        versions: RefCell::new(talos.versions.take()),
        ..healthy_cluster()
    };
    let dir = tempfile::tempdir().unwrap();
    let out = go_ok(&upgrade_config(dir.path(), true), &talos);
    let steps = upgrade_lines(&out);
    assert_eq!(steps[3].step, UpgradeStepKind::Skip);
    assert_eq!(steps[3].node.as_deref(), Some(CPS[0]));
    assert_eq!(steps[4].step, UpgradeStepKind::Gate);
    assert_eq!(steps[4].node.as_deref(), Some(CPS[1]));
    go_ok(&upgrade_config(dir.path(), false), &talos);
    assert_eq!(
        upgrades(&talos),
        [
            format!("snapshot {}", CPS[0]),
            format!("upgrade {}", CPS[1]),
            format!("upgrade {}", CPS[2]),
            format!("upgrade {WORKER}"),
        ]
    );

    // Once all run the target, nothing is planned beyond the check, and nothing is done.
    let dir = tempfile::tempdir().unwrap();
    let out = go_ok(&upgrade_config(dir.path(), true), &talos);
    let kinds: Vec<UpgradeStepKind> = upgrade_lines(&out).iter().map(|s| s.step).collect();
    assert_eq!(kinds[0], UpgradeStepKind::Preflight);
    assert!(kinds[1..].iter().all(|k| *k == UpgradeStepKind::Skip));
    assert_eq!(kinds.len(), 5);
    let before = upgrades(&talos).len();
    let out = go_ok(&upgrade_config(dir.path(), false), &talos);
    assert!(out.is_empty());
    assert_eq!(upgrades(&talos).len(), before);
}

#[test]
fn a_node_that_never_comes_back_on_the_target_fails_after_its_bounded_wait() {
    let dir = tempfile::tempdir().unwrap();
    let talos = Scripted {
        stays_behind: vec![CPS[0].into()],
        ..healthy_cluster()
    };
    let (result, _) = go(&upgrade_config(dir.path(), false), &talos);
    let said = result.unwrap_err().to_string();
    assert_says_all(
        &said,
        &[
            "edge-par-cp-1: not back on v1.13.11 within 3 looks",
            "last: runs v1.13.9",
        ],
    );
    assert_eq!(upgrades(&talos).len(), 2);
}

#[test]
fn a_path_or_a_client_of_another_minor_is_refused_before_anything_changes() {
    let dir = tempfile::tempdir().unwrap();
    let talos = healthy_cluster();
    talos
        .versions
        .borrow_mut()
        .insert(CPS[1].into(), "v1.11.6".into());
    let (result, out) = go(&upgrade_config(dir.path(), false), &talos);
    let said = error_of(result, Exit::Usage);
    assert!(
        said.starts_with("edge-par-cp-2: v1.11.6 to v1.13.11 skips a minor"),
        "{said}"
    );
    assert!(out.is_empty());
    assert!(upgrades(&talos).is_empty());

    let talos = Scripted {
        client: Some("v1.12.6".into()),
        ..healthy_cluster()
    };
    let (result, _) = go(&upgrade_config(dir.path(), true), &talos);
    let said = error_of(result, Exit::Usage);
    assert_says_all(&said, &["talosctl is v1.12.6", "use a talosctl of v1.13"]);
    assert!(upgrades(&talos).is_empty());
}

#[test]
fn an_upgrades_target_and_installers_are_checked_naming_the_argument() {
    let dir = tempfile::tempdir().unwrap();
    let talosconfig = dir.path().join("talosconfig");
    std::fs::write(&talosconfig, "context: x\n").unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, "apiVersion: v1\n").unwrap();
    let parse = |extra: &[&str]| {
        let mut args = vec![
            "talos-lifecycle",
            "--talosconfig",
            talosconfig.to_str().unwrap(),
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "upgrade",
        ];
        args.extend_from_slice(extra);
        resolve(Cli::try_parse_from(args).unwrap(), &Env::default())
    };
    let good = [
        "--to",
        "v1.13.11",
        "--control-plane-installer",
        CP_INSTALLER,
    ];
    let ok = parse(&[&good[..], &["--worker-installer", WORKER_INSTALLER]].concat());
    assert!(ok.is_ok(), "{ok:?}");
    let said = parse(&[
        "--to",
        "1.13",
        "--control-plane-installer",
        CP_INSTALLER,
        "--worker-installer",
        WORKER_INSTALLER,
    ])
    .unwrap_err()
    .to_string();
    assert!(
        said.contains("--to") && said.contains("not a release"),
        "{said}"
    );
    let said = parse(&[
        "--to",
        "v1.13.11",
        "--control-plane-installer",
        "ghcr.io/siderolabs/installer:v1.13.11",
        "--worker-installer",
        WORKER_INSTALLER,
    ])
    .unwrap_err()
    .to_string();
    assert!(said.contains("--control-plane-installer"), "{said}");
    let said = parse(&[&good[..], &["--worker-installer", CP_INSTALLER]].concat())
        .unwrap_err()
        .to_string();
    assert!(
        said.contains("--worker-installer") && said.contains("metal-installer"),
        "{said}"
    );
}

#[test]
fn talosctl_versions_and_kubectl_readiness_are_read_as_they_print_them() {
    let answer = r#"{"metadata":{"hostname":"edge-par-cp-1"},"version":{"tag":"v1.13.9","sha":"3ebd10a7","os":"linux","arch":"amd64"},"features":{"rbac":true}}"#;
    assert_eq!(talos::parse_version(answer).unwrap(), "v1.13.9");
    assert!(talos::parse_version("{}").is_err());
    assert_eq!(
        talos::parse_client_version("Client:\nTalos v1.13.9\n").unwrap(),
        "v1.13.9"
    );
    let node = |status: &str| {
        format!(
            r#"{{"status":{{"conditions":[{{"type":"MemoryPressure","status":"False"}},{{"type":"Ready","status":"{status}"}}]}}}}"#
        )
    };
    assert!(talos::parse_ready(&node("True")).unwrap());
    assert!(!talos::parse_ready(&node("Unknown")).unwrap());
}

fn k8s_config(to: &str, out_dir: &Path, dry_run: bool) -> Config {
    config(
        Action::UpgradeK8s {
            to: to.into(),
            run: quick_run(out_dir),
        },
        dry_run,
    )
}

/// What `upgrade-k8s --to <to>` (its snapshots in `dir`) says when it stops with `exit`.
fn k8s_refusal(talos: &Scripted, to: &str, dir: &Path, exit: Exit) -> String {
    let (result, _) = go(&k8s_config(to, dir, false), talos);
    error_of(result, exit)
}

/// A healthy cluster whose kubelets all run `version`.
fn kubelets_at(version: &str) -> Scripted {
    let talos = healthy_cluster();
    *talos.kubelets.borrow_mut() = CPS
        .iter()
        .chain([&WORKER])
        .map(|name| Kubelet {
            name: (*name).to_owned(),
            version: version.into(),
            ready: true,
            cordoned: false,
        })
        .collect();
    *talos.static_pods.borrow_mut() = CPS
        .iter()
        .flat_map(|node| {
            [
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
            ]
            .map(|component| StaticPod {
                name: format!("{component}-{node}"),
                component: component.to_owned(),
                image: format!("registry.k8s.io/{component}:{version}"),
            })
        })
        .collect();
    talos
}

/// talosctl upgrade-k8s upgrades from the lowest version the control planes' static pods run
/// (siderolabs/talos v1.13.9 pkg/cluster/kubernetes/detect.go:17-72), whatever the kubelets
/// run: a control plane left behind is upgraded though every kubelet runs the target, and the
/// path is checked from it.
#[test]
fn a_control_plane_component_behind_the_kubelets_is_upgraded_from_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let talos = kubelets_at("v1.36.3");
    talos.static_pods.borrow_mut()[4].image =
        "registry.k8s.io/kube-controller-manager:v1.35.2".into();
    let out = go_ok(&k8s_config("v1.36.3", dir.path(), true), &talos);
    let steps = upgrade_lines(&out);
    assert_eq!(steps.last().unwrap().step, UpgradeStepKind::WaitUpgraded);
    let says = &steps[0].says;
    assert!(says.contains("from v1.35.2"), "{says}");
    assert!(
        says.contains("kube-controller-manager-edge-par-cp-2 v1.35.2"),
        "{says}"
    );
    let out = go_ok(&k8s_config("v1.36.3", dir.path(), false), &talos);
    let lines: Vec<serde_json::Value> = testkit::process::json_lines(&out);
    let done: KubernetesUpgraded = serde_json::from_value(lines[1].clone()).unwrap();
    assert_eq!(done.from, "v1.35.2");
    assert!(upgrades(&talos).contains(&format!("upgrade-k8s {}", CPS[0])));

    // A component two minors behind: refused, named.
    let talos = kubelets_at("v1.36.3");
    talos.static_pods.borrow_mut()[0].image =
        "registry.k8s.io/kube-apiserver:v1.34.9@sha256:ab".into();
    let said = k8s_refusal(&talos, "v1.36.3", dir.path(), Exit::Usage);
    assert!(
        said.starts_with("kube-apiserver-edge-par-cp-1: v1.34.9 to v1.36.3 skips a minor"),
        "{said}"
    );

    // No static pod listed: talosctl could not tell where it upgrades from; nothing is done.
    let talos = kubelets_at("v1.35.2");
    talos.static_pods.borrow_mut().clear();
    let said = k8s_refusal(&talos, "v1.36.3", dir.path(), Exit::Failure);
    assert!(said.contains("no control plane static pod"), "{said}");
    assert!(upgrades(&talos).is_empty());
}

#[test]
fn kubectls_pod_list_is_read_for_the_static_pods_images() {
    let list = r#"{"items":[
        {"metadata":{"name":"kube-apiserver-edge-par-cp-1","labels":{"k8s-app":"kube-apiserver"}},
         "spec":{"containers":[{"name":"kube-apiserver","image":"registry.k8s.io/kube-apiserver:v1.36.3"}]}},
        {"metadata":{"name":"kube-scheduler-edge-par-cp-1","labels":{"k8s-app":"kube-scheduler"}},
         "spec":{"containers":[{"name":"sidecar","image":"x:1"},
                                {"name":"kube-scheduler","image":"mirror.example:5000/kube-scheduler:v1.35.2@sha256:00"}]}}]}"#;
    let pods = talos::parse_static_pods(list).unwrap();
    assert_eq!(
        pods,
        [
            StaticPod {
                name: "kube-apiserver-edge-par-cp-1".into(),
                component: "kube-apiserver".into(),
                image: "registry.k8s.io/kube-apiserver:v1.36.3".into(),
            },
            StaticPod {
                name: "kube-scheduler-edge-par-cp-1".into(),
                component: "kube-scheduler".into(),
                image: "mirror.example:5000/kube-scheduler:v1.35.2@sha256:00".into(),
            }
        ]
    );
    assert_eq!(talos::image_tag(&pods[1].image), Some("v1.35.2"));
    assert_eq!(talos::image_tag("mirror.example:5000/kube-scheduler"), None);
    assert!(
        talos::parse_static_pods(
            r#"{"items":[{"metadata":{"labels":{"k8s-app":"kube-apiserver"}}}]}"#
        )
        .is_err()
    );
}

#[test]
fn a_kubernetes_upgrade_is_planned_snapshot_first_through_one_healthy_control_plane() {
    let dir = tempfile::tempdir().unwrap();
    let talos = kubelets_at("v1.35.2");
    let out = go_ok(&k8s_config("v1.36.3", dir.path(), true), &talos);
    let steps = upgrade_lines(&out);
    use UpgradeStepKind::*;
    assert_eq!(
        steps.iter().map(|s| s.step).collect::<Vec<_>>(),
        [
            Preflight,
            TakeSnapshot,
            CheckSnapshot,
            Gate,
            Upgrade,
            WaitUpgraded
        ]
    );
    assert!(steps[0].says.contains("from v1.35.2"), "{}", steps[0].says);
    assert!(
        steps[4]
            .says
            .contains("talosctl upgrade-k8s --to v1.36.3 through edge-par-cp-1")
    );
    assert!(
        !talos
            .calls
            .borrow()
            .iter()
            .any(|c| c.starts_with("upgrade-k8s"))
    );

    let out = go_ok(&k8s_config("v1.36.3", dir.path(), false), &talos);
    let lines: Vec<serde_json::Value> = testkit::process::json_lines(&out);
    assert_eq!(lines[0]["kind"], "EtcdSnapshot");
    let done: KubernetesUpgraded = serde_json::from_value(lines[1].clone()).unwrap();
    assert_eq!(
        (done.from.as_str(), done.to.as_str()),
        ("v1.35.2", "v1.36.3")
    );
    assert_eq!(done.nodes.len(), 4);
    assert_eq!(
        upgrades(&talos),
        [
            format!("snapshot {}", CPS[0]),
            format!("upgrade-k8s {}", CPS[0])
        ]
    );

    // Run again: every kubelet runs the target, nothing is done.
    let before = talos.calls.borrow().len();
    let out = go_ok(&k8s_config("v1.36.3", dir.path(), false), &talos);
    assert!(out.is_empty());
    assert!(
        !talos.calls.borrow()[before..]
            .iter()
            .any(|c| c.starts_with("upgrade") || c.starts_with("snapshot"))
    );
}

#[test]
fn a_kubernetes_target_off_the_path_or_unsupported_or_an_unhealthy_cluster_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // A kubelet two minors behind.
    let talos = kubelets_at("v1.35.2");
    talos.kubelets.borrow_mut()[3].version = "v1.34.9".into();
    let said = k8s_refusal(&talos, "v1.36.3", dir.path(), Exit::Usage);
    assert!(
        said.starts_with("edge-par-worker-1: v1.34.9 to v1.36.3 skips a minor"),
        "{said}"
    );
    // A minor Talos 1.13 does not run.
    let talos = kubelets_at("v1.36.3");
    let said = k8s_refusal(&talos, "v1.37.0", dir.path(), Exit::Usage);
    assert!(
        said.contains("Talos v1.13 runs Kubernetes 1.31 to 1.36, not v1.37.0"),
        "{said}"
    );
    assert!(upgrades(&talos).is_empty());
    // A member without a leader: the snapshot, then nothing.
    let talos = kubelets_at("v1.35.2").status(CPS[1], vec![no_leader("b")]);
    let said = k8s_refusal(&talos, "v1.36.3", dir.path(), Exit::Failure);
    assert!(said.contains("edge-par-cp-2: member b reports"), "{said}");
    assert!(
        !upgrades(&talos)
            .iter()
            .any(|c| c.starts_with("upgrade-k8s"))
    );
}

#[test]
fn kubectls_node_list_is_read_for_names_kubelets_readiness_and_cordons() {
    let list = r#"{"items":[
        {"metadata":{"name":"edge-par-cp-1"},"status":{"nodeInfo":{"kubeletVersion":"v1.36.3"},
         "conditions":[{"type":"Ready","status":"True"}]}},
        {"metadata":{"name":"edge-par-worker-1"},"spec":{"unschedulable":true},"status":{"nodeInfo":{"kubeletVersion":"v1.35.2"},
         "conditions":[{"type":"Ready","status":"False"}]}}]}"#;
    let kubelets = talos::parse_kubelets(list).unwrap();
    assert_eq!(
        kubelets,
        [
            Kubelet {
                name: "edge-par-cp-1".into(),
                version: "v1.36.3".into(),
                ready: true,
                cordoned: false
            },
            Kubelet {
                name: "edge-par-worker-1".into(),
                version: "v1.35.2".into(),
                ready: false,
                cordoned: true
            }
        ]
    );
    assert!(talos::parse_kubelets(r#"{"items":[{"metadata":{}}]}"#).is_err());
}

/// The removal of `node`'s member (`--failed` when `failed`), its snapshot into `dir`.
fn remove_config(dir: &Path, node: &str, failed: bool, dry_run: bool) -> Config {
    let action = Action::RemoveMember {
        node: node.into(),
        failed,
        out_dir: dir.to_path_buf(),
        wait_tries: 3,
        wait_interval_seconds: 1,
    };
    config(action, dry_run)
}

fn three_members() -> Scripted {
    Scripted {
        members: CPS.iter().map(|s| (*s).to_owned()).collect(),
        ..Scripted::default()
    }
}

/// The calls that change something: a snapshot, a leave, a removal.
fn changes(talos: &Scripted) -> Vec<String> {
    talos
        .calls
        .borrow()
        .iter()
        .filter(|c| !c.starts_with("status") && !c.starts_with("member"))
        .cloned()
        .collect()
}

/// A run on `talos` refused saying `needle`, nothing changed.
fn assert_refused_unchanged(config: &Config, talos: &Scripted, needle: &str) {
    let (result, _) = go(config, talos);
    let said = result.unwrap_err().to_string();
    assert!(said.contains(needle), "{said}");
    assert!(changes(talos).is_empty());
}

#[test]
fn a_member_leaves_after_a_snapshot_only_while_every_other_member_is_healthy() {
    let dir = tempfile::tempdir().unwrap();
    // One other member without a leader: nothing is done, and it is named.
    let talos = three_members()
        .status(CPS[0], vec![healthy("1", "1")])
        .status(CPS[1], vec![no_leader("2")])
        .status(CPS[2], vec![healthy("3", "1")]);
    for dry_run in [true, false] {
        let (result, out) = go(&remove_config(dir.path(), CPS[2], false, dry_run), &talos);
        fails_saying(
            result,
            &[
                "edge-par-cp-3's etcd member stays",
                "edge-par-cp-2: member 2 reports etcdserver: no leader",
            ],
        );
        assert!(out.is_empty());
    }
    assert!(changes(&talos).is_empty(), "{:?}", talos.calls.borrow());

    // All healthy: the plan, then the snapshot, the leave and the list read until it is gone.
    let talos = three_members()
        .status(CPS[0], vec![healthy("1", "1")])
        .status(CPS[1], vec![healthy("2", "1")])
        .status(CPS[2], vec![healthy("3", "1")]);
    let out = go_ok(&remove_config(dir.path(), CPS[2], false, true), &talos);
    let kinds: Vec<_> = plan_lines(&out).iter().map(|s| s.step).collect();
    assert_eq!(
        kinds,
        [
            EtcdStepKind::TakeSnapshot,
            EtcdStepKind::CheckSnapshot,
            EtcdStepKind::Leave,
            EtcdStepKind::WaitRemoved
        ]
    );
    assert!(changes(&talos).is_empty());
    let out = go_ok(&remove_config(dir.path(), CPS[2], false, false), &talos);
    let snapshot = dir.path().join("edge-par-20260619T170000Z.snapshot");
    assert_eq!(
        changes(&talos),
        [
            format!("snapshot {} {}", CPS[0], snapshot.display()),
            format!("leave {}", CPS[2]),
        ]
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    let removal: pop_common::records::EtcdMemberRemoval = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(removal.how, pop_common::records::MemberRemovalHow::Leave);
    assert_eq!(removal.member_id.as_deref(), Some("3"));
    assert_eq!(removal.members, [CPS[0], CPS[1]]);
    assert_eq!(removal.snapshot.as_deref(), Some(snapshot.as_path()));

    // Run again: no member of that name any more, nothing is done.
    std::fs::remove_file(&snapshot).unwrap();
    talos.calls.borrow_mut().clear();
    let out = go_ok(&remove_config(dir.path(), CPS[2], false, false), &talos);
    assert!(out.contains("\"how\":\"already-gone\""), "{out}");
    assert!(changes(&talos).is_empty(), "{:?}", talos.calls.borrow());
}

#[test]
fn a_gone_node_s_member_is_removed_through_another_only_when_asked_and_only_if_it_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let talos = three_members()
        .status(CPS[0], vec![down()])
        .status(CPS[1], vec![healthy("2", "2")])
        .status(CPS[2], vec![healthy("3", "2")]);
    // Without --failed a node that does not answer cannot leave: the way out is said.
    let not_failed = remove_config(dir.path(), CPS[0], false, false);
    assert_refused_unchanged(&not_failed, &talos, "FAILED=yes");

    let out = go_ok(&remove_config(dir.path(), CPS[0], true, false), &talos);
    let removal: pop_common::records::EtcdMemberRemoval =
        serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(
        removal.how,
        pop_common::records::MemberRemovalHow::RemoveMember
    );
    assert_eq!(removal.members, [CPS[1], CPS[2]]);
    assert_eq!(changes(&talos)[1], format!("remove-member {} 1", CPS[1]));

    // --failed for a member that answers healthy is refused: it should leave.
    let talos = three_members()
        .status(CPS[0], vec![healthy("1", "1")])
        .status(CPS[1], vec![healthy("2", "1")])
        .status(CPS[2], vec![healthy("3", "1")]);
    let failed = remove_config(dir.path(), CPS[0], true, false);
    assert_refused_unchanged(&failed, &talos, "answers healthy: let it leave");

    // A name that is no control plane: bad input.
    let (result, _) = go(
        &remove_config(dir.path(), "edge-par-worker-1", false, false),
        &talos,
    );
    let said = error_of(result, Exit::Usage);
    assert!(
        said.contains("edge-par-cp-1, edge-par-cp-2, edge-par-cp-3"),
        "{said}"
    );
}

fn await_config(tries: u32) -> Config {
    config(
        Action::AwaitHealthy {
            wait_tries: tries,
            wait_interval_seconds: 1,
        },
        false,
    )
}

#[test]
fn a_replaced_control_plane_is_awaited_until_it_votes_and_every_node_is_ready() {
    // cp-3's new machine: its Talos API first does not answer, then its member is a learner,
    // then a voter following the leader.
    let learner = Ok(MemberStatus {
        learner: true,
        ..healthy("c", "a").unwrap()
    });
    let talos = healthy_cluster().status(CPS[2], vec![down(), learner, healthy("c", "a")]);
    let out = go_ok(&await_config(5), &talos);
    assert_eq!(out, "", "stdout carries no record");
    let looks = |talos: &Scripted| {
        talos
            .calls
            .borrow()
            .iter()
            .filter(|c| *c == &format!("status {}", CPS[2]))
            .count()
    };
    assert_eq!(looks(&talos), 3, "one look a try until it passes");
    // Readiness is read only once etcd passes, for every node of the inventory.
    let ready: Vec<String> = talos
        .calls
        .borrow()
        .iter()
        .filter(|c| c.starts_with("ready"))
        .cloned()
        .collect();
    assert_eq!(
        ready,
        [
            "ready edge-par-worker-1",
            "ready edge-par-cp-1",
            "ready edge-par-cp-2",
            "ready edge-par-cp-3"
        ]
    );
    assert!(changes(&talos).iter().all(|c| c.starts_with("ready")));

    // A node that never gets Ready: a failure after the bounded wait, naming it.
    let talos = Scripted {
        not_ready: vec![CPS[2].into()],
        ..healthy_cluster()
    };
    let (result, _) = go(&await_config(4), &talos);
    let said = error_of(result, Exit::Failure);
    assert!(
        said.starts_with("edge-par is not healthy after 4 looks"),
        "{said}"
    );
    assert!(
        said.contains("edge-par-cp-3: its Kubernetes node is not Ready"),
        "{said}"
    );
    assert_eq!(looks(&talos), 4);

    // A member still a learner at the end is named as such.
    let learner = Ok(MemberStatus {
        learner: true,
        ..healthy("c", "a").unwrap()
    });
    let talos = healthy_cluster().status(CPS[2], vec![learner]);
    let said = go(&await_config(2), &talos).0.unwrap_err().to_string();
    assert!(
        said.contains("edge-par-cp-3: member c is a learner"),
        "{said}"
    );
}
