//! What the Kubernetes nodes went through while a test acted: `kubectl get nodes --watch`, each
//! change a line, for the cordons and uncordons a drain makes through the API server.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A running `kubectl get nodes --watch`, stopped by [`NodeWatch::changes`] or when dropped.
#[derive(Debug)]
pub struct NodeWatch {
    child: Child,
    out: PathBuf,
}

/// One node's state as the watch printed it: its name and whether it was unschedulable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSeen {
    pub name: String,
    pub cordoned: bool,
}

/// A node's cordon as the watch saw it: its name, the change that cordoned it and the one that
/// made it schedulable again (`None`: still cordoned when the watch stopped), as indexes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cordon {
    pub name: String,
    pub from: usize,
    pub until: Option<usize>,
}

impl NodeWatch {
    /// Starts the watch with `kubectl` (`--kubeconfig` set), its output in `scratch`, and
    /// waits until it has printed the first state of `nodes` nodes, so that no later change is
    /// missed.
    #[allow(clippy::panic)] // a test helper: a watch it cannot start fails the test
    pub fn start(mut kubectl: Command, nodes: usize, scratch: &Path) -> NodeWatch {
        let out = scratch.join("node-watch.out");
        let file = std::fs::File::create(&out)
            .unwrap_or_else(|err| panic!("cannot make {}: {err}", out.display()));
        let template = r#"jsonpath={.metadata.name}={.spec.unschedulable}{"\n"}"#;
        let child = kubectl
            .args(["get", "nodes", "--watch", "-o", template])
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start kubectl get nodes --watch: {err}"));
        let watch = NodeWatch { child, out };
        crate::eventually("kubectl's watch to print every node", || {
            (watch.seen().len() >= nodes).then_some(())
        });
        watch
    }

    fn seen(&self) -> Vec<NodeSeen> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(name, unschedulable)| NodeSeen {
                name: name.to_owned(),
                cordoned: unschedulable == "true",
            })
            .collect()
    }

    /// Stops the watch: every state it printed, in order (repeated states included).
    pub fn changes(mut self) -> Vec<NodeSeen> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.seen()
    }
}

impl Drop for NodeWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every cordon in `changes`, in the order they began.
pub fn cordons(changes: &[NodeSeen]) -> Vec<Cordon> {
    let mut found: Vec<Cordon> = Vec::new();
    for (i, seen) in changes.iter().enumerate() {
        let open = found
            .iter_mut()
            .find(|c| c.name == seen.name && c.until.is_none());
        match (open, seen.cordoned) {
            (None, true) => found.push(Cordon {
                name: seen.name.clone(),
                from: i,
                until: None,
            }),
            (Some(cordon), false) => cordon.until = Some(i),
            _ => {}
        }
    }
    found
}
