//! The ValidatingAdmissionPolicy that keeps the lists-refresh job to `spec.pluginConfig.lists`,
//! evaluated by the real API server (`api_server::edge`: the rendered edge applied on this test
//! binary's control plane): the job's requests go out with the token of the ServiceAccount its
//! CronJob runs as, through RBAC and then the policy, and each refused change is refused by the
//! server with the policy's message. Refused changes are sent as server-side dry runs, which go
//! through admission and store nothing; the allowed ones are stored.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Output;
use std::sync::OnceLock;

use serde_json::{Value, json};
use testkit::control_plane::ServiceAccount;

use crate::api_server::{Edge, edge, example, kubectl};

/// The WasmPlugin the policy guards, and the rest of the edge, as rendered.
fn rendered() -> Vec<Value> {
    example("edge-pow.example.json")
}

fn find<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    objects.iter().find(|o| o["kind"] == kind).unwrap()
}

/// The ServiceAccount the rendered CronJob's pods run as, in its namespace.
fn job_account() -> (String, String) {
    let objects = rendered();
    let cron = find(&objects, "CronJob");
    let account = &cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["serviceAccountName"];
    (
        cron["metadata"]["namespace"].as_str().unwrap().to_owned(),
        account.as_str().unwrap().to_owned(),
    )
}

/// The edge, and the job's credentials and namespace, once the server enforces the policy.
struct Job {
    edge: &'static Edge,
    account: ServiceAccount,
    namespace: String,
}

/// The policy takes effect once the API server's admission plugin has loaded it (informers, a
/// moment after the apply): until then a change it refuses goes through. Each test waits for it
/// through the first that asks, with a change it must refuse (bounded, dry run).
fn job(test: &str) -> Option<&'static Job> {
    static JOB: OnceLock<Job> = OnceLock::new();
    let edge = edge(test)?;
    Some(JOB.get_or_init(|| {
        let (namespace, name) = job_account();
        let job = Job {
            edge,
            account: edge.plane.service_account(&namespace, &name),
            namespace,
        };
        testkit::eventually("the policy to refuse the job's change of spec.url", || {
            let out = job.patch(&json!({"spec": {"url": "oci://example.org/other@sha256:0"}}));
            String::from_utf8_lossy(&out.stderr)
                .contains("ValidatingAdmissionPolicy")
                .then_some(())
        });
        job
    }))
}

impl Job {
    /// A merge patch of the plugin by the job, as a server-side dry run.
    fn patch(&self, patch: &Value) -> Output {
        testkit::process::run_with_stdin(
            self.account.kubectl().args(self.dry_run_patch(patch)),
            b"",
        )
    }

    /// A server-side apply of `object` by the job, as its field manager sends the lists (a
    /// server-side dry run when `dry_run`).
    fn apply(&self, object: &Value, dry_run: bool) -> Output {
        let mut args = vec![
            "apply",
            "--server-side",
            "--field-manager=edgepop-lists",
            "--force-conflicts",
            "--filename=-",
        ];
        if dry_run {
            args.push("--dry-run=server");
        }
        testkit::process::run_with_stdin(
            self.account.kubectl().args(args),
            object.to_string().as_bytes(),
        )
    }

    /// The policy's messages in the server's refusal of `patch`, by the job.
    fn refused(&self, patch: &Value) -> Vec<String> {
        let out = self.patch(patch);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{patch} was taken");
        let messages: Vec<String> = stderr
            .lines()
            .filter_map(|l| l.split_once("denied request: ").map(|(_, m)| m.to_owned()))
            .collect();
        assert!(
            !messages.is_empty(),
            "{patch}: refused, but not by the policy: {stderr}"
        );
        messages
    }

    /// [`Self::refused`] by exactly one message of the policy: that message.
    fn refused_once(&self, patch: &Value) -> String {
        let mut refused = self.refused(patch);
        assert_eq!(refused.len(), 1, "{patch}: {refused:?}");
        refused.remove(0)
    }

    /// The plugin as stored.
    fn plugin(&self) -> Value {
        let ns = format!("--namespace={}", self.namespace);
        let out = kubectl(
            self.edge.plane,
            &["get", "wasmplugin", "pow-filter", &ns, "--output=json"],
            "",
        );
        serde_json::from_str(&testkit::process::success_stdout(&out)).unwrap()
    }

    /// kubectl's arguments for a merge patch of the plugin, as a server-side dry run: it goes
    /// through authorisation and admission, and nothing is stored.
    fn dry_run_patch(&self, patch: &Value) -> Vec<String> {
        vec![
            "patch".to_owned(),
            "wasmplugin".to_owned(),
            "pow-filter".to_owned(),
            format!("--namespace={}", self.namespace),
            "--type=merge".to_owned(),
            "--dry-run=server".to_owned(),
            format!("--patch={patch}"),
        ]
    }
}

/// `pluginConfig.lists` as lists-refresh publishes it.
fn lists(version: &str, tor: &str) -> Value {
    json!({"version": version, "generated_at": version, "sets": {"tor": tor}})
}

const ONLY_LISTS: &str = "may change only spec.pluginConfig.lists";

#[test]
fn the_job_may_publish_the_first_lists_then_new_ones() {
    let Some(job) = job("the_job_may_publish_the_first_lists") else {
        return;
    };
    let rendered_spec = find(&rendered(), "WasmPlugin")["spec"].clone();
    assert!(job.plugin()["spec"]["pluginConfig"].get("lists").is_none());
    // The trusted agents' keys, which the job delivers with the lists (the RFC 9421 test key).
    let agents = json!({"examplebot": {"keys": {"keys": [
        {"kty": "OKP", "crv": "Ed25519", "x": "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"}]}}});
    for (list, agents) in [
        (lists("2026-11-30T10:17:00Z", "185.220.101.0/24\n"), None),
        (
            json!({
                "version": "2026-11-30T11:17:00Z", "generated_at": "2026-11-30T11:17:00Z",
                "sets": {"tor": "185.220.101.0/24\n2a0b:f4c2::/40\n", "hosting": "3.0.0.0/8\n"},
            }),
            Some(agents),
        ),
    ] {
        // What lists-refresh sends: a server-side apply of the lists (and agents) alone, as its
        // field manager, taking them over.
        let namespace = &job.namespace;
        let mut apply = json!({
            "apiVersion": "extensions.istio.io/v1alpha1", "kind": "WasmPlugin",
            "metadata": {"name": "pow-filter", "namespace": namespace},
            "spec": {"pluginConfig": {"lists": list}},
        });
        if let Some(agents) = &agents {
            apply["spec"]["pluginConfig"]["agents"] = agents.clone();
        }
        let out = job.apply(&apply, false);
        testkit::process::success_stdout(&out);
        let mut stored = job.plugin()["spec"].clone();
        assert_eq!(stored["pluginConfig"]["lists"], list);
        if let Some(agents) = &agents {
            assert_eq!(&stored["pluginConfig"]["agents"], agents);
        }
        let config = stored["pluginConfig"].as_object_mut().unwrap();
        config.remove("lists");
        config.remove("agents");
        assert_eq!(
            stored, rendered_spec,
            "the rest of the plugin is as rendered"
        );
    }
}

#[test]
fn the_job_may_not_change_the_module_or_its_environment() {
    let Some(job) = job("the_job_may_not_change_the_module") else {
        return;
    };
    for (field, value) in [
        ("url", json!("oci://attacker.example/pow:evil")),
        ("sha256", json!("ab".repeat(32))),
        (
            "vmConfig",
            json!({"env": [{"name": "POW_HMAC_SECRET", "value": "known"}]}),
        ),
        ("failStrategy", json!("FAIL_CLOSE")),
        ("match", json!([{"ports": [{"number": 80}]}])),
        // A key the rendered object does not have: gaining one is a change too.
        ("priority", json!(1000)),
        // So is losing one.
        ("match", Value::Null),
    ] {
        let refused = job.refused_once(&json!({"spec": {field: value}}));
        assert!(refused.contains(ONLY_LISTS), "{field}: {refused}");
        assert!(refused.ends_with("(spec)"), "{field}: {refused}");
    }
}

#[test]
fn the_job_may_not_change_the_filter_settings_beside_the_lists() {
    let Some(job) = job("the_job_may_not_change_the_filter_settings") else {
        return;
    };
    let settings = find(&rendered(), "WasmPlugin")["spec"]["pluginConfig"].clone();
    let setting = settings
        .as_object()
        .unwrap()
        .keys()
        .find(|k| *k != "lists")
        .unwrap()
        .clone();
    for change in [
        json!({setting.as_str(): "something else"}),
        json!({"demo_secret": "known"}),
        json!({setting.as_str(): null}),
        // Beside new lists, which alone it may write.
        json!({"mode": "off", "lists": lists("2026-11-30T12:17:00Z", "")}),
    ] {
        let refused = job.refused_once(&json!({"spec": {"pluginConfig": change}}));
        assert!(
            refused.ends_with("(spec.pluginConfig)"),
            "{change}: {refused}"
        );
    }
}

#[test]
fn the_job_may_not_relabel_or_annotate_the_plugin() {
    let Some(job) = job("the_job_may_not_relabel_the_plugin") else {
        return;
    };
    for change in [
        json!({"labels": {"app.kubernetes.io/managed-by": "someone-else"}}),
        json!({"annotations": {"a": "b"}}),
    ] {
        let refused = job.refused_once(&json!({"metadata": change}));
        assert!(
            refused.contains("metadata.labels, metadata.annotations"),
            "{change}: {refused}"
        );
    }
}

/// What the garbage collector and deletion read: an owner of the job's invention makes the
/// collector delete the plugin (its owner's uid does not exist), and a finalizer of its own holds
/// the plugin's deletion forever. Whether the merge patch or server-side apply carries them, the
/// server refuses them.
#[test]
fn the_job_may_not_give_the_plugin_an_owner_a_finalizer_or_a_generated_name() {
    let Some(job) = job("the_job_may_not_give_the_plugin_an_owner") else {
        return;
    };
    let owner = json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "gone",
                        "uid": "00000000-0000-4000-8000-000000000000"}]);
    for (field, value) in [
        ("ownerReferences", owner.clone()),
        ("finalizers", json!(["example.org/hold"])),
        ("generateName", json!("pow-filter-")),
    ] {
        let refused = job.refused_once(&json!({"metadata": {field: value}}));
        assert!(refused.contains(ONLY_LISTS), "{field}: {refused}");
        assert!(
            refused.contains(&format!("metadata.{field}")),
            "{field}: {refused}"
        );
    }
    // The same owner by server-side apply, as the job's own field manager sends its lists.
    let apply = json!({
        "apiVersion": "extensions.istio.io/v1alpha1", "kind": "WasmPlugin",
        "metadata": {"name": "pow-filter", "namespace": job.namespace, "ownerReferences": owner},
    });
    let out = job.apply(&apply, true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("metadata.ownerReferences"),
        "{stderr}"
    );
    assert!(job.plugin()["metadata"].get("ownerReferences").is_none());
}

#[test]
fn the_policy_binds_the_job_only() {
    let Some(job) = job("the_policy_binds_the_job_only") else {
        return;
    };
    // The operator's own change, and another identity with every right, go through (dry run).
    let namespace = &job.namespace;
    let patch = json!({"spec": {"url": "oci://registry.example/pow:next"}});
    for identity in [
        vec![],
        vec![
            format!("--as=system:serviceaccount:{namespace}:default"),
            "--as-group=system:masters".to_owned(),
        ],
    ] {
        let mut args = job.dry_run_patch(&patch);
        args.extend(identity);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = kubectl(job.edge.plane, &args, "");
        testkit::process::success_stdout(&out);
    }
    // The server type-checked the policy's expressions against the WasmPlugin's schema (a
    // controller, after the policy is stored), and found nothing to warn about.
    let objects = rendered();
    let name = find(&objects, "ValidatingAdmissionPolicy")["metadata"]["name"]
        .as_str()
        .unwrap();
    let policy = testkit::eventually("the policy to be type-checked", || {
        let out = kubectl(
            job.edge.plane,
            &["get", "validatingadmissionpolicy", name, "--output=json"],
            "",
        );
        let policy: Value = serde_json::from_str(&testkit::process::success_stdout(&out)).unwrap();
        (policy["status"]["observedGeneration"] == policy["metadata"]["generation"])
            .then_some(policy)
    });
    assert_eq!(policy["status"]["typeChecking"], json!({}), "{policy}");
}
