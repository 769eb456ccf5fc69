#![allow(clippy::unwrap_used, clippy::panic)]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pop_common::records::{EtcdPlanStep, EtcdSnapshotStatus, EtcdStepKind};

use super::*;
use crate::quorum::{MemberStatus, quorum};

/// A cluster scripted by node name: each member's status answers, in turn (the last one
/// repeats), the member list, and what the calls that change things did.
#[derive(Debug, Default)]
struct Scripted {
    statuses: RefCell<BTreeMap<String, Vec<Result<MemberStatus, NodeError>>>>,
    members: Vec<String>,
    recover_answer: Option<NodeError>,
    snapshot_status: Option<Result<EtcdSnapshotStatus, String>>,
    calls: RefCell<Vec<String>>,
}

impl Scripted {
    fn status(self, node: &str, answers: Vec<Result<MemberStatus, NodeError>>) -> Self {
        self.statuses.borrow_mut().insert(node.to_owned(), answers);
        self
    }
}

impl Talos for Scripted {
    fn etcd_status(&self, node: &ControlPlane) -> Result<MemberStatus, NodeError> {
        self.calls
            .borrow_mut()
            .push(format!("status {}", node.name));
        let mut statuses = self.statuses.borrow_mut();
        let answers = statuses.get_mut(&node.name).unwrap();
        if answers.len() > 1 {
            answers.remove(0)
        } else {
            answers[0].clone()
        }
    }
    fn etcd_members(&self, node: &ControlPlane) -> Result<Vec<String>, NodeError> {
        self.calls
            .borrow_mut()
            .push(format!("members {}", node.name));
        Ok(self.members.clone())
    }
    fn snapshot(&self, node: &ControlPlane, path: &Path) -> Result<(), NodeError> {
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
    fn recover(&self, node: &ControlPlane, snapshot: &Path, skip: bool) -> Result<(), NodeError> {
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
        wait_tries: 3,
        wait_interval_seconds: 1,
    }
}

/// 2026-06-19T17:00:00Z.
const NOW: u64 = 1_781_888_400;

fn go(config: &Config, talos: &Scripted) -> (Result<(), Error>, String) {
    let mut out = Vec::new();
    let result = run_with(
        config,
        talos,
        &NoSleep,
        NOW,
        inventory().as_bytes(),
        &mut out,
    );
    (result, String::from_utf8(out).unwrap())
}

/// Whether a recovery was asked of any node.
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
    let node = |name: &str| ControlPlane {
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
    let (result, out) = go(&snapshot_config(&out_dir, true), &talos);
    result.unwrap();
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
    let (result, out) = go(&snapshot_config(&out_dir, false), &talos);
    result.unwrap();
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
    let error = result.unwrap_err();
    assert_eq!(error.exit(), Exit::Failure);
    let text = error.to_string();
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
        let error = result.unwrap_err();
        assert_eq!(error.exit(), Exit::Failure);
        let text = error.to_string();
        assert!(
            text.contains("2 of 3 members follow leader c (edge-par-cp-2, edge-par-cp-3)"),
            "{text}"
        );
        assert!(out.is_empty());
    }
    assert!(!recovered(&talos));
}

#[test]
fn a_snapshot_etcdutl_refuses_stops_the_restore_before_any_node_is_asked() {
    let talos = Scripted {
        snapshot_status: Some(Err("snapshot file integrity check failed".into())),
        ..Scripted::default()
    };
    let (result, _) = go(&config(restore_action("bad.snapshot"), false), &talos);
    let error = result.unwrap_err();
    assert_eq!(error.exit(), Exit::Usage);
    assert!(
        error
            .to_string()
            .starts_with("bad.snapshot: refused by etcdutl"),
        "{error}"
    );
    assert!(talos.calls.borrow().is_empty());
}

#[test]
fn a_lost_quorum_is_recovered_on_the_first_node_talos_answers_for_then_waited_for() {
    let talos = Scripted::default()
        .status(CPS[0], vec![down()])
        .status(CPS[1], vec![etcd_down(), etcd_down(), healthy("9f", "9f")])
        .status(CPS[2], vec![no_leader("c")]);
    let (result, out) = go(&config(restore_action("s.snapshot"), true), &talos);
    result.unwrap();
    let steps = plan_lines(&out);
    let kinds: Vec<_> = steps.iter().map(|s| s.step).collect();
    assert_eq!(
        kinds,
        [
            EtcdStepKind::CheckSnapshot,
            EtcdStepKind::Recover,
            EtcdStepKind::WaitHealthy
        ]
    );
    assert_eq!(steps[1].node.as_deref(), Some(CPS[1]));
    assert!(steps[1].says.contains("revision 3"), "{}", steps[1].says);
    assert!(!recovered(&talos));

    let (result, out) = go(&config(restore_action("s.snapshot"), false), &talos);
    result.unwrap();
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
    assert!(text.contains("edge-par-cp-1: bootstrap --recover-from: Talos answered AlreadyExists: etcd data directory is not empty"), "{text}");
    assert!(text.contains("--system-labels-to-wipe=EPHEMERAL"), "{text}");
    assert!(out.is_empty());
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
    // Asked once for the gate, then three times while waiting.
    let asked = talos
        .calls
        .borrow()
        .iter()
        .filter(|c| *c == "status edge-par-cp-1")
        .count();
    assert_eq!(asked, 4);
}

#[test]
fn talosctl_tables_and_errors_are_read_as_talosctl_prints_them() {
    // Printed by the real talosctl v1.13.9 against the node stand-in.
    let status = "MEMBER             DB SIZE   IN USE           LEADER             RAFT INDEX   RAFT TERM   RAFT APPLIED INDEX   LEARNER   PROTOCOL   STORAGE   ERRORS\n\
                  56b6861ce0e011c0   20 kB     16 kB (80.00%)   56b6861ce0e011c0   4            2           4                    false     3.6.12     3.6.0     \n";
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
    let mut out = Vec::new();
    let no_cp = inventory().replace("controlplane", "worker");
    let error = run_with(
        &config(restore_action("s"), true),
        &talos,
        &NoSleep,
        NOW,
        no_cp.as_bytes(),
        &mut out,
    )
    .unwrap_err();
    assert_eq!(error.exit(), Exit::Usage);
    assert!(
        error
            .to_string()
            .contains("field `nodes`: no control plane"),
        "{error}"
    );
    let no_ip = inventory().replace(r#""public_ipv4":"203.0.113.12""#, r#""public_ipv4":null"#);
    let error = run_with(
        &config(restore_action("s"), true),
        &talos,
        &NoSleep,
        NOW,
        no_ip.as_bytes(),
        &mut out,
    )
    .unwrap_err();
    assert!(
        error.to_string().contains("nodes[2].public_ipv4"),
        "{error}"
    );
}
