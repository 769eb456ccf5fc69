//! `pipelines/infra.sh add-worker` and `remove-worker` (what `make add-worker` and `make
//! remove-worker` run first): NODE checked against the config's workers before anything, then,
//! for a removal, the plan shown, the question, and the steps in their order: apply's (the
//! records), the drain and the Node's deletion through the real kubectl against a real API
//! server, then the server's destroy plan carried out as shown. scw-infra's calls to Scaleway
//! and the node tools are recorded stand-ins here (scw-infra's own tests play them against the
//! Scaleway stand-in).

use std::fs;
use std::path::Path;

use testkit::control_plane::ControlPlane;

use super::{Env, failed, inventory, node_pipeline_pins, node_tool_calls, ok, record_tool};

const TEST: &str = "infra_workers";

/// The node tools as recording stand-ins: scw-infra's `apply` hands on an inventory, its
/// `destroy --plan-out FILE` writes FILE (as the real one does, which then shows it), its other
/// commands are the real scw-infra's (they read local files only); kubectl, recorded, is the
/// real one. Returns the folder (first on PATH) and the log.
fn recording_tools(env: &Env, kubectl: &Path) -> (String, std::path::PathBuf) {
    let (bin, log) = env.node_tools();
    fs::write(env.path("scw-inventory.json"), inventory(11)).unwrap();
    let scw_infra = format!(
        "case $1 in\n  apply) cat {inventory} ;;\n  clear-user-data) cat ;;\n  destroy)\n    \
         prev=; for a; do [[ $prev == --plan-out ]] && : > \"$a\"; prev=$a; done ;;\n  \
         *) exec {real} \"$@\" ;;\nesac",
        inventory = env.path("scw-inventory.json").display(),
        real = testkit::workspace::bin("scw-infra").display()
    );
    record_tool(&bin, "scw-infra", &log, &scw_infra);
    for tool in ["scw-rescue-flash", "talos-apply-insecure"] {
        record_tool(&bin, tool, &log, "cat");
    }
    record_tool(
        &bin,
        "kubectl",
        &log,
        &format!("exec {} \"$@\"", kubectl.display()),
    );
    (bin.display().to_string(), log)
}

#[test]
fn a_worker_is_added_only_once_listed_and_removed_only_once_out_of_the_config() {
    let Some(env) = Env::new(TEST) else { return };
    // The example config lists edge-worker-1 only.
    for (step, node, says) in [
        ("add-worker-plan", "", "NODE=<worker name>"),
        ("add-worker-plan", "edge-worker-9", "not under workers"),
        ("remove-worker-plan", "edge-worker-1", "still under workers"),
        (
            "remove-worker",
            "edge-worker-1",
            "apply would order it again",
        ),
    ] {
        let out = env.infra(step, &[("NODE", node)]);
        failed(&out, 1, &[says]);
    }
    assert!(!env.out("inventory.json").exists(), "nothing was written");
}

#[test]
fn remove_worker_shows_asks_then_takes_its_records_out_drains_deletes_and_destroys_as_shown() {
    let Some(env) = Env::new(TEST) else { return };
    let Some(kubectl) = testkit::upstream::program(TEST, "kubectl") else {
        return;
    };
    let Some(plane) = ControlPlane::start(TEST) else {
        return;
    };
    plane.add_node(
        "edge-worker-2",
        &[("edge.node.kubernetes.io/public", "true")],
    );
    let (_factory, _digest) = node_pipeline_pins(&env);
    let (bin, log) = recording_tools(&env, &kubectl);
    fs::write(env.out("inventory.json"), inventory(11)).unwrap();
    let kubeconfig = plane.kubeconfig().display().to_string();
    // The recorded kubectl first on PATH, then the talosctl stand-in's folder, as env.infra has it.
    let path = format!(
        "{bin}:{}:{}",
        env.path("bin").display(),
        std::env::var("PATH").unwrap()
    );
    let run = |step: &str, extra: &[(&str, &str)]| {
        let mut vars = vec![
            ("PATH", path.as_str()),
            ("BIN", bin.as_str()),
            ("NODE", "edge-worker-2"),
            ("KUBECONFIG", kubeconfig.as_str()),
            ("DNS_WAIT", "0"),
        ];
        vars.extend_from_slice(extra);
        env.infra(step, &vars)
    };

    // The plan: every step said, the server's destroy plan made and thrown away.
    let shown = ok(&run("remove-worker-plan", &[]));
    for says in ["drain edge-worker-2", "delete node edge-worker-2", "TTL"] {
        assert!(shown.contains(says), "{says}: {shown}");
    }
    let calls = node_tool_calls(&log);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(calls[0].2.starts_with("destroy") && calls[0].2.contains("--plan-out"));
    fs::write(&log, "").unwrap();

    // No terminal and no CONFIRM: refused after the plan, before any step.
    let out = run("remove-worker", &[]);
    failed(&out, 1, &["without a terminal"]);
    let calls = node_tool_calls(&log);
    assert!(
        calls.iter().all(|c| c.2.starts_with("destroy")),
        "{calls:?}"
    );
    plane.kubectl_ok(&["get", "node", "edge-worker-2"], "");
    fs::write(&log, "").unwrap();

    ok(&run("remove-worker", &[("CONFIRM", "yes")]));
    assert_the_removal_s_order(&log);
    let out = plane
        .kubectl()
        .args(["get", "node", "edge-worker-2"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "the Node is gone");
}

/// The steps of a removal, as the recorded tools saw them: its records out first (apply), then
/// the drain, the Node, and the server as the plan shown said.
fn assert_the_removal_s_order(log: &Path) {
    let order: Vec<String> = node_tool_calls(log)
        .into_iter()
        .map(|(tool, _, args)| {
            // kubectl's first words are its --kubeconfig flag.
            let skip = if tool == "kubectl" { 2 } else { 0 };
            let words: Vec<&str> = args.split(' ').skip(skip).take(2).collect();
            format!("{tool} {}", words.join(" "))
        })
        .filter(|c| !c.starts_with("scw-rescue-flash") && !c.starts_with("talos-apply"))
        .collect();
    let at = |prefix: &str| {
        order
            .iter()
            .position(|c| c.starts_with(prefix))
            .unwrap_or_else(|| panic!("{prefix}: {order:?}"))
    };
    // Its records out first (apply), then the drain, the Node, the server as shown.
    assert!(at("scw-infra apply") < at("kubectl drain"), "{order:?}");
    assert!(at("kubectl drain") < at("kubectl delete"), "{order:?}");
    // The plan is made first (shown before the question), and carried out last.
    assert!(at("scw-infra destroy") < at("scw-infra apply"), "{order:?}");
    assert_eq!(
        order.last().map(String::as_str),
        Some("scw-infra destroy --config")
    );
    assert!(at("kubectl delete") < order.len() - 1, "{order:?}");
    let destroy = node_tool_calls(log)
        .into_iter()
        .rfind(|c| c.2.starts_with("destroy"))
        .unwrap();
    assert!(
        destroy.2.contains("--node edge-worker-2")
            && destroy.2.contains("--plan ")
            && destroy.2.contains("--yes"),
        "{destroy:?}"
    );
}
