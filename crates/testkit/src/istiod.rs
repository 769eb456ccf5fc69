//! istiod's side of the Gateway API, played by tests: istiod does not build here
//! (`k8s/versions.env`), and `make apply-edge` waits for its answers. What it writes is what
//! istiod 1.30 writes (pilot/pkg/config/kube/gatewaycommon, and the golden status files of
//! pilot/pkg/config/kube/gateway/testdata): the `Accepted` condition of a GatewayClass whose
//! `controllerName` is its own, and of each Gateway of such a class, for the generation it saw,
//! through the status subresource, under its field manager `pilot-discovery`.
//!
//! The kinds are named with their group: Istio's CRDs have a `gateways` too, and kubectl's
//! discovery cache, made before the Gateway API's CRDs exist, would resolve the short name to
//! Istio's for ten minutes.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use serde_json::json;

/// The `controllerName` of the classes istiod handles.
pub const CONTROLLER: &str = "istio.io/gateway-controller";

/// istiod's `Accepted` condition for a Gateway.
#[derive(Debug, Clone, Copy)]
pub struct Answer {
    pub status: &'static str,
    pub reason: &'static str,
    pub message: &'static str,
}

/// What istiod writes for a Gateway it accepts.
pub const ACCEPTED: Answer = Answer {
    status: "True",
    reason: "Accepted",
    message: "Resource accepted",
};

/// What istiod writes for a class of its own.
const CLASS_ACCEPTED: Answer = Answer {
    status: "True",
    reason: "Accepted",
    message: "Handled by Istio controller",
};

const GATEWAY_CLASSES: &str = "gatewayclasses.gateway.networking.k8s.io";
const GATEWAYS: &str = "gateways.gateway.networking.k8s.io";

/// istiod, answering through `kubectl` (a command for the cluster, `--kubeconfig` set). It
/// remembers which generation of each object it answered, and answers a new one again.
pub struct Istiod<K: Fn() -> Command> {
    kubectl: K,
    answered: BTreeMap<String, i64>,
}

impl<K: Fn() -> Command> std::fmt::Debug for Istiod<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Istiod")
            .field("answered", &self.answered)
            .finish_non_exhaustive()
    }
}

impl<K: Fn() -> Command> Istiod<K> {
    pub fn new(kubectl: K) -> Istiod<K> {
        Istiod {
            kubectl,
            answered: BTreeMap::new(),
        }
    }

    /// One look, as istiod's controllers react: every class of its controller and every
    /// Gateway of such a class that has a generation not answered yet gets its `Accepted`
    /// condition (`gateways` for the Gateways).
    pub fn look(&mut self, gateways: Answer) {
        let classes = self.list(
            GATEWAY_CLASSES,
            "{range .items[*]}|{.metadata.name}|{.metadata.generation}|{.spec.controllerName}{\"\\n\"}{end}",
        );
        let ours: Vec<&Vec<String>> = classes
            .iter()
            .filter(|fields| fields.get(2).map(String::as_str) == Some(CONTROLLER))
            .collect();
        for fields in &ours {
            if let [name, generation, _] = &fields[..] {
                self.answer(GATEWAY_CLASSES, "", name, generation, CLASS_ACCEPTED);
            }
        }
        let class_names: Vec<&String> = ours.iter().filter_map(|f| f.first()).collect();
        let listed = self.list(
            GATEWAYS,
            "{range .items[*]}|{.metadata.namespace}|{.metadata.name}|{.metadata.generation}|{.spec.gatewayClassName}{\"\\n\"}{end}",
        );
        for fields in &listed {
            if let [namespace, name, generation, class] = &fields[..]
                && class_names.contains(&class)
            {
                self.answer(GATEWAYS, namespace, name, generation, gateways);
            }
        }
    }

    /// How many GatewayClasses, and how many Gateways, have been answered.
    pub fn answered(&self) -> (usize, usize) {
        let of = |kind: &str| {
            self.answered
                .keys()
                .filter(|key| key.starts_with(&format!("{kind} ")))
                .count()
        };
        (of(GATEWAY_CLASSES), of(GATEWAYS))
    }

    /// The `|`-separated fields of each line kubectl prints for `jsonpath` (each line starts
    /// with `|`); nothing when the kind is not served yet.
    fn list(&self, kind: &str, jsonpath: &str) -> Vec<Vec<String>> {
        let out = (self.kubectl)()
            .args(["get", kind, "--all-namespaces", "-o"])
            .arg(format!("jsonpath={jsonpath}"))
            .stdin(Stdio::null())
            .output();
        let Some(out) = out.ok().filter(|o| o.status.success()) else {
            return Vec::new();
        };
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| line.strip_prefix('|'))
            .map(|line| line.split('|').map(str::to_owned).collect())
            .collect()
    }

    fn answer(&mut self, kind: &str, namespace: &str, name: &str, generation: &str, a: Answer) {
        let Ok(generation) = generation.parse::<i64>() else {
            return;
        };
        let key = format!("{kind} {namespace}/{name}");
        if self.answered.get(&key) == Some(&generation) {
            return;
        }
        let status = json!({"status": {"conditions": [{
            "type": "Accepted", "status": a.status, "reason": a.reason, "message": a.message,
            "observedGeneration": generation, "lastTransitionTime": "2026-11-30T00:00:00Z",
        }]}});
        let mut command = (self.kubectl)();
        command.args(["patch", kind, name]);
        if !namespace.is_empty() {
            command.args(["--namespace", namespace]);
        }
        let out = command
            .args([
                "--subresource=status",
                "--type=merge",
                "--field-manager=pilot-discovery",
                "-p",
                &status.to_string(),
            ])
            .stdin(Stdio::null())
            .output();
        match out {
            Ok(out) if out.status.success() => {
                self.answered.insert(key, generation);
            }
            // Shown with the test's failure: why istiod's answer was refused. The next look
            // tries again.
            Ok(out) => eprintln!(
                "istiod: patch {key}: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!("istiod: patch {key}: {e}"),
        }
    }
}
