#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::SocketAddr;

use pop_common::records::{NodeFailure, steps};

use super::*;

/// A clock that counts its sleeps.
#[derive(Debug, Default)]
struct Counted(RefCell<u32>);
impl Sleeper for Counted {
    fn sleep(&self, _: Duration) {
        *self.0.borrow_mut() += 1;
    }
}

/// A scripted node: what it answers to each probe and proof, in order, and what it took.
#[derive(Default)]
struct Scripted {
    probes: RefCell<VecDeque<Probe>>,
    proofs: RefCell<VecDeque<Proof>>,
    /// The pins each probe, proof and apply was made with.
    pins: RefCell<Vec<String>>,
    applied: RefCell<Vec<(SocketAddr, Vec<u8>)>>,
    refuse: Option<String>,
}

impl Scripted {
    fn new(probes: Vec<Probe>, proofs: Vec<Proof>) -> Self {
        Scripted {
            probes: RefCell::new(probes.into()),
            proofs: RefCell::new(proofs.into()),
            ..Scripted::default()
        }
    }
}

impl NodeApi for Scripted {
    fn probe(&self, _: SocketAddr, pins: &[String]) -> Probe {
        self.pins.borrow_mut().push(format!("probe {pins:?}"));
        self.probes
            .borrow_mut()
            .pop_front()
            .expect("probed more often than scripted")
    }
    fn apply(&self, address: SocketAddr, pin: &str, config: &[u8]) -> Result<Applied, CallError> {
        self.pins.borrow_mut().push(format!("apply {pin}"));
        if let Some(refusal) = &self.refuse {
            return Err(CallError::Failed {
                code: tonic::Code::InvalidArgument,
                message: refusal.clone(),
            });
        }
        self.applied.borrow_mut().push((address, config.to_vec()));
        Ok(Applied {
            mode: "NO_REBOOT".into(),
            details: "Applied configuration without a reboot".into(),
            warnings: vec![],
        })
    }
    fn prove(&self, _: SocketAddr, maintenance_pin: Option<&str>) -> Proof {
        self.pins
            .borrow_mut()
            .push(format!("prove {maintenance_pin:?}"));
        self.proofs
            .borrow_mut()
            .pop_front()
            .expect("proved more often than scripted")
    }
}

fn config() -> Config {
    Config {
        config_dir: PathBuf::from("unused"),
        trust: Trust {
            context: "edge-par".into(),
            ca: vec![],
            chain: vec![],
            key: std::sync::Arc::new(rustls::pki_types::PrivateKeyDer::Pkcs8(vec![0u8].into())),
        },
        port: 50000,
        pins: vec![],
        boot: Poll {
            tries: 4,
            interval: Duration::from_secs(10),
        },
        wait: Poll {
            tries: 3,
            interval: Duration::from_secs(5),
        },
        timeout: Duration::from_secs(1),
    }
}

fn inventory(steps: &str) -> NodeInventory {
    serde_json::from_str(&format!(
        r#"{{"kind":"NodeInventory","version":2,"cluster_name":"c","cluster_endpoint":"https://api.example.com:6443",
        "ssh_key_ids":[],
        "nodes":[{{"name":"w1","role":"worker","kind":"elastic-metal","zone":"fr-par-1","id":"22222222-2222-4222-8222-222222222222",
        "public_ipv4":"192.0.2.7","public_ipv6":null,"private_ipv4":null,"steps":{steps}}}]}}"#
    ))
    .unwrap()
}

fn maintenance() -> Probe {
    Probe::Maintenance {
        fingerprint: "fp".into(),
    }
}

fn unreachable() -> Probe {
    Probe::Unreachable("connection refused".into())
}

/// `apply_all` of one worker config with the default options, sleeping not at all.
fn apply_worker(
    api: &Scripted,
    inventory: &mut NodeInventory,
    worker_config: &[u8],
) -> (Outcome, Vec<NodeFailure>) {
    apply_all(
        &config(),
        inventory,
        &Configs::from([("w1".to_owned(), worker_config.to_vec())]),
        api,
        &Counted::default(),
    )
}

/// A worker recorded with `steps` that answers configured and proves ours, run once: it passes
/// unfailed, is reported configured earlier, and is sent no config.
fn run_configured_and_ours(steps: &str) -> (Outcome, NodeInventory) {
    let api = Scripted::new(vec![Probe::Configured], vec![Proof::Ours]);
    let mut inventory = inventory(steps);
    let (outcome, failures) = apply_worker(&api, &mut inventory, b"new");
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(outcome.already_configured, ["w1"]);
    assert!(api.applied.borrow().is_empty());
    (outcome, inventory)
}

/// A worker with no step recorded, run once against `api`: it fails, alone, its failure naming
/// every needle. The inventory as the run left it.
fn run_failing(api: &Scripted, needles: &[&str]) -> NodeInventory {
    let mut inventory = inventory("{}");
    let (outcome, failures) = apply_worker(api, &mut inventory, b"w");
    assert_eq!(outcome.failed, ["w1"]);
    let message = failures[0].to_string();
    testkit::process::assert_says_all(&message, needles);
    inventory
}

#[test]
fn a_booting_node_is_waited_for_then_the_first_certificate_pins_apply_and_the_proof() {
    let api = Scripted::new(
        vec![unreachable(), unreachable(), maintenance()],
        vec![
            Proof::Maintenance,
            Proof::Unreachable("rebooting".into()),
            Proof::Ours,
        ],
    );
    let mut inventory = inventory("{}");
    let configs = Configs::from([
        ("w1".to_owned(), b"worker".to_vec()),
        ("cp-1".to_owned(), b"cp".to_vec()),
    ]);
    let sleeps = Counted::default();
    let (outcome, failures) = apply_all(&config(), &mut inventory, &configs, &api, &sleeps);
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(outcome.configured, ["w1"]);
    // Two sleeps waiting for the boot, one before the first proof, two between proofs.
    assert_eq!(*sleeps.0.borrow(), 5);
    assert_eq!(
        api.applied.borrow().as_slice(),
        [("192.0.2.7:50000".parse().unwrap(), b"worker".to_vec())]
    );
    // Unpinned probes until the node answered; then its certificate is the pin.
    assert_eq!(
        api.pins.borrow().as_slice(),
        [
            "probe []",
            "probe []",
            "probe []",
            "apply fp",
            "prove Some(\"fp\")",
            "prove Some(\"fp\")",
            "prove Some(\"fp\")"
        ]
    );
    assert_eq!(
        inventory.nodes[0].step(steps::CONFIG_APPLIED),
        Some(digest(b"worker").as_str())
    );
}

#[test]
fn a_node_that_never_answers_fails_naming_the_bound() {
    let api = Scripted::new(vec![unreachable(); 4], vec![]);
    run_failing(
        &api,
        &[
            "w1: 192.0.2.7:50000: its Talos API did not answer after 4 checks 10s apart",
            "connection refused",
            "not in admin_cidrs",
        ],
    );
    assert!(api.applied.borrow().is_empty());
}

#[test]
fn a_matching_digest_is_skipped_without_a_call() {
    let api = Scripted::new(vec![], vec![]);
    let mut inventory = inventory(&format!(r#"{{"config_applied":"{}"}}"#, digest(b"worker")));
    let (outcome, failures) = apply_worker(&api, &mut inventory, b"worker");
    assert!(failures.is_empty());
    assert_eq!(outcome.skipped, ["w1"]);
    assert!(api.pins.borrow().is_empty());
}

#[test]
fn a_configured_node_is_left_alone_if_ours_and_fails_if_not() {
    let (outcome, recorded) = run_configured_and_ours(r#"{"config_applied":"sha256:old"}"#);
    assert_eq!(
        recorded.nodes[0].step(steps::CONFIG_APPLIED),
        Some("sha256:old")
    );
    assert!(
        outcome
            .to_string()
            .contains("configured earlier and ours (use talosctl): w1")
    );

    let foreign = Scripted::new(
        vec![Probe::Configured],
        vec![Proof::Foreign {
            fingerprint: Some("other".into()),
            why: "its certificate is not one of our machine CA's: UnknownIssuer".into(),
        }],
    );
    run_failing(
        &foreign,
        &[
            "configured, but not as a node of this cluster",
            "edge-par",
            "UnknownIssuer",
        ],
    );
    assert!(foreign.applied.borrow().is_empty());
}

#[test]
fn a_flashed_node_found_configured_and_ours_records_the_proof_not_a_config() {
    // The first run's proof came too late: the image is recorded, the config is not. Found
    // configured and ours now, the node is recorded as proved ours on its image, so that the
    // flash's guard knows it is live; no config is claimed, as none was seen applied.
    let (_, recorded) = run_configured_and_ours(r#"{"image_flashed":"sha256:img"}"#);
    let node = &recorded.nodes[0];
    assert_eq!(node.step(steps::PROVED_OURS), Some("sha256:img"));
    assert_eq!(node.step(steps::CONFIG_APPLIED), None);
    assert_eq!(node.proved_image(), Some("sha256:img"));

    // A node never flashed (a control plane) is recorded as ours, with no image to prove.
    let (_, instance) = run_configured_and_ours("{}");
    let node = &instance.nodes[0];
    assert_eq!(node.step(steps::PROVED_OURS), Some(steps::PROVED));
    assert_eq!(node.proved_image(), None);
}

#[test]
fn a_certificate_neither_pinned_nor_ours_after_the_config_fails_unrecorded() {
    let api = Scripted::new(
        vec![maintenance()],
        vec![
            Proof::Maintenance,
            Proof::Foreign {
                fingerprint: Some("mitm".into()),
                why: "UnknownIssuer".into(),
            },
        ],
    );
    let inventory = run_failing(
        &api,
        &["presented a certificate (SPKI mitm) that is neither the pinned maintenance one (fp)"],
    );
    assert_eq!(inventory.nodes[0].step(steps::CONFIG_APPLIED), None);
}

#[test]
fn a_node_that_never_proves_ours_fails_unrecorded_and_is_named() {
    let api = Scripted::new(vec![maintenance()], vec![Proof::Maintenance; 3]);
    let inventory = run_failing(
        &api,
        &[
            "w1: 192.0.2.7:50000: took the config but did not prove ours (mutual TLS with the talosconfig) after 3 checks 5s apart: still in maintenance mode",
        ],
    );
    assert_eq!(inventory.nodes[0].step(steps::CONFIG_APPLIED), None);
}

#[test]
fn pin_mismatch_and_a_refusal_send_nothing_more() {
    for (probe, refuse, needle) in [
        (
            Probe::PinMismatch {
                fingerprint: "AAA=".into(),
            },
            None,
            "AAA= is not one of the pinned ones",
        ),
        (
            maintenance(),
            Some("bad YAML".to_owned()),
            "ApplyConfiguration failed: InvalidArgument: bad YAML",
        ),
    ] {
        let mut api = Scripted::new(vec![probe], vec![]);
        api.refuse = refuse;
        let mut inventory = inventory("{}");
        let (_, failures) = apply_worker(&api, &mut inventory, b"w");
        assert!(
            failures.len() == 1 && failures[0].to_string().contains(needle),
            "{failures:?}"
        );
        assert!(api.applied.borrow().is_empty());
        assert_eq!(inventory.nodes[0].step(steps::CONFIG_APPLIED), None);
    }
}

#[test]
fn pins_must_be_base64_sha256_and_the_talosconfig_must_read() {
    use clap::Parser;
    let env = Env::default();
    let bad = Cli::parse_from(["t", "--cert-fingerprint", "abc"]);
    let err = resolve(bad, &env).unwrap_err();
    assert_eq!(err.exit(), Exit::Usage);
    assert!(err.to_string().contains("--cert-fingerprint `abc`"));
    let missing = Cli::parse_from(["t", "--talosconfig", "/nonexistent/talosconfig"]);
    let err = resolve(missing, &env).unwrap_err();
    assert_eq!(err.exit(), Exit::Usage);
    assert!(
        err.to_string()
            .starts_with("--talosconfig /nonexistent/talosconfig: cannot read"),
        "{err}"
    );
}

/// An inventory of a control plane and the workers `names` (192.0.2.11, .12, ...), none
/// configured yet.
fn cluster(names: &[&str]) -> String {
    let node = |name: &str, role: &str, kind: &str, address: String| {
        format!(
            r#"{{"name":"{name}","role":"{role}","kind":"{kind}","zone":"fr-par-1","id":"22222222-2222-4222-8222-222222222222",
            "public_ipv4":"{address}","public_ipv6":null,"private_ipv4":null,"steps":{{}}}}"#
        )
    };
    let mut nodes = vec![node(
        "cp-1",
        "controlplane",
        "instance",
        "192.0.2.10".into(),
    )];
    for (i, name) in names.iter().enumerate() {
        nodes.push(node(
            name,
            "worker",
            "elastic-metal",
            format!("192.0.2.{}", 11 + i),
        ));
    }
    format!(
        r#"{{"kind":"NodeInventory","version":2,"cluster_name":"c","cluster_endpoint":"https://api.example.com:6443","ssh_key_ids":[],"nodes":[{}]}}"#,
        nodes.join(",")
    )
}

#[test]
fn each_worker_is_sent_its_own_config_and_its_digest_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    for (file, text) in [
        ("controlplane.yaml", "cp"),
        ("worker.yaml", "the template, no node's"),
        ("worker-edge-a.yaml", "a's"),
        ("worker-edge-b.yaml", "b's"),
    ] {
        std::fs::write(dir.path().join(file), text).unwrap();
    }
    let config = Config {
        config_dir: dir.path().to_path_buf(),
        ..config()
    };
    let api = Scripted::new(
        vec![Probe::Configured, maintenance(), maintenance()],
        vec![Proof::Ours, Proof::Ours, Proof::Ours],
    );
    let mut out = Vec::new();
    let input = cluster(&["edge-a", "edge-b"]);
    run_with(
        &config,
        &api,
        &Counted::default(),
        input.as_bytes(),
        &mut out,
    )
    .unwrap();
    assert_eq!(
        api.applied.borrow().as_slice(),
        [
            ("192.0.2.11:50000".parse().unwrap(), b"a's".to_vec()),
            ("192.0.2.12:50000".parse().unwrap(), b"b's".to_vec())
        ]
    );
    let written: NodeInventory = serde_json::from_slice(&out).unwrap();
    let applied: Vec<Option<&str>> = written
        .nodes
        .iter()
        .map(|n| n.step(steps::CONFIG_APPLIED))
        .collect();
    let (a, b) = (digest(b"a's"), digest(b"b's"));
    assert_eq!(applied, [None, Some(a.as_str()), Some(b.as_str())]);
}

#[test]
fn a_worker_without_its_own_config_or_with_no_host_name_stops_the_run_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    for file in ["controlplane.yaml", "worker.yaml", "worker-edge-a.yaml"] {
        std::fs::write(dir.path().join(file), "x").unwrap();
    }
    let config = Config {
        config_dir: dir.path().to_path_buf(),
        ..config()
    };
    let missing = dir.path().join("worker-edge-b.yaml").display().to_string();
    for (names, needles) in [
        (
            ["edge-a", "edge-b"],
            vec![
                missing.as_str(),
                "no machine config for the worker edge-b",
                "make apply-infra",
            ],
        ),
        (
            ["edge-a", "../edge-a"],
            vec!["nodes[2].name", "`../edge-a` is not a host name"],
        ),
    ] {
        let api = Scripted::default();
        let mut out = Vec::new();
        let input = cluster(&names);
        let err = run_with(
            &config,
            &api,
            &Counted::default(),
            input.as_bytes(),
            &mut out,
        )
        .unwrap_err();
        assert_eq!(err.exit(), Exit::Usage);
        testkit::process::assert_says_all(&err.to_string(), &needles);
        // Refused before any node was called, and nothing written.
        assert!(api.pins.borrow().is_empty());
        assert!(out.is_empty());
    }
}
