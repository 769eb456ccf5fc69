//! `power on|off`: the plan waits for the changes already under way to end, sends every action
//! (Instances `poweron`/`poweroff`, never standby, which is still billed; Elastic Metal
//! `start`/`stop`), then waits for each target state, so the machines change state together; a
//! wait is only ever for a state a change under way or a sent action leads to. `--nodes` picks
//! the control planes or the worker (`make down` stops the worker first). The action and wait
//! steps are shared with `apply`, which powers on what it finds stopped; `state` says where the
//! servers are, or the addresses of those that run (`make down` shuts those down through Talos
//! before it cuts the power).

use std::net::Ipv4Addr;

use scaleway::baremetal::{self, ServerStatus};
use scaleway::instance::{self, ServerAction, ServerState};
use serde::Serialize;

use crate::cluster::Cluster;
use crate::error::{InfraError, R};
use crate::plan::{Created, Ref, Steps};
use crate::tags::Role;
use crate::wait;

/// An Instance action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstancePower {
    pub node: String,
    pub server: Ref,
    pub action: ServerAction,
}

/// Where an Instance wait ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceTarget {
    Running,
    Stopped,
    /// Stopped or stopped in place: where a stop already under way ends (`poweroff` or
    /// `stop_in_place`), and what `poweron` starts from.
    Off,
    /// Stopped, from a stop already under way: waited for until off, then powered off if it
    /// ended in standby (stopped in place, still billed), as a shutdown from inside the guest
    /// (Talos's, by `make down`) ends.
    StoppedAfterStop,
}

impl InstanceTarget {
    pub fn reached(self, state: &ServerState) -> bool {
        match self {
            InstanceTarget::Running => *state == ServerState::Running,
            InstanceTarget::Stopped | InstanceTarget::StoppedAfterStop => {
                *state == ServerState::Stopped
            }
            InstanceTarget::Off => state.is_off(),
        }
    }
}

impl std::fmt::Display for InstanceTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            InstanceTarget::Running => "running",
            InstanceTarget::Stopped => "stopped",
            InstanceTarget::Off => "stopped or stopped in place",
            InstanceTarget::StoppedAfterStop => {
                "stopped (powered off if the stop under way ends in place)"
            }
        })
    }
}

/// Waiting for an Instance to reach a state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitInstance {
    pub node: String,
    pub server: Ref,
    pub until: InstanceTarget,
}

/// What can be asked of an Elastic Metal server's power.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerAction {
    Start,
    Stop,
}

/// An Elastic Metal action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerPower {
    pub name: String,
    pub server: Ref,
    pub action: WorkerAction,
}

/// Waiting for an Elastic Metal server to reach a status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitWorker {
    pub name: String,
    pub server: Ref,
    pub status: ServerStatus,
}

/// What brings a server from where it is to where it is asked to be, in order: a wait for a
/// change already under way to end (`before`), the action (`action`), and the wait for the
/// state the action leads to (`after`). A wait is only ever for a state that a change under way
/// or an action of the plan leads to: a stopping server is waited for until it is off before it
/// is powered on, never waited for until it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition<P, W> {
    pub before: Option<W>,
    pub action: Option<P>,
    pub after: Option<W>,
}

impl<P, W> Transition<P, W> {
    fn none() -> Self {
        Transition {
            before: None,
            action: None,
            after: None,
        }
    }

    /// The transition of the steps a state leads to: a wait for `before`, the action, a wait for
    /// `after`, each built for the one server by `wait` and `power`.
    fn of<T, A>(
        (before, action, after): (Option<T>, Option<A>, Option<T>),
        wait: impl Fn(T) -> W,
        power: impl FnOnce(A) -> P,
    ) -> Self {
        Transition {
            before: before.map(&wait),
            action: action.map(power),
            after: after.map(&wait),
        }
    }

    /// Whether the server changes state (its addresses and state are known only after).
    pub fn changes(&self) -> bool {
        self.after.is_some()
    }
}

impl InstancePower {
    pub fn execute(&self, cluster: &Cluster<'_>, created: &Created, step: usize) -> R<()> {
        let id = created.resolve(&self.server, step)?;
        pop_common::info!("{} {}", self.action, self.node);
        cluster
            .api
            .instance()
            .action(cluster.zone(), &id, self.action.clone())?;
        Ok(())
    }
}

impl WaitInstance {
    pub fn execute(
        &self,
        cluster: &Cluster<'_>,
        created: &Created,
        step: usize,
    ) -> R<instance::Server> {
        let id = created.resolve(&self.server, step)?;
        if self.until != InstanceTarget::StoppedAfterStop {
            return wait::instance(cluster, &id, &self.node, self.until);
        }
        let off = wait::instance(cluster, &id, &self.node, InstanceTarget::Off)?;
        if off.state != ServerState::StoppedInPlace {
            return Ok(off);
        }
        pop_common::info!(
            "{}: stopped in place (standby, still billed): {}",
            self.node,
            ServerAction::PowerOff
        );
        cluster
            .api
            .instance()
            .action(cluster.zone(), &id, ServerAction::PowerOff)?;
        wait::instance(cluster, &id, &self.node, InstanceTarget::Stopped)
    }
}

impl WorkerPower {
    pub fn execute(&self, cluster: &Cluster<'_>, created: &Created, step: usize) -> R<()> {
        let id = created.resolve(&self.server, step)?;
        let api = cluster.api.baremetal();
        match self.action {
            WorkerAction::Start => {
                pop_common::info!("starting the Elastic Metal server {}", self.name);
                api.start(cluster.zone(), &id)?;
            }
            WorkerAction::Stop => {
                pop_common::info!("stopping the Elastic Metal server {}", self.name);
                api.stop(cluster.zone(), &id)?;
            }
        }
        Ok(())
    }
}

impl WaitWorker {
    pub fn execute(
        &self,
        cluster: &Cluster<'_>,
        created: &Created,
        step: usize,
    ) -> R<baremetal::Server> {
        let id = created.resolve(&self.server, step)?;
        wait::worker(cluster, &id, &self.name, &self.status)
    }
}

/// One step of `power`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum PowerStep {
    PowerInstance(InstancePower),
    PowerWorker(WorkerPower),
    WaitInstance(WaitInstance),
    WaitWorker(WaitWorker),
}

/// What brings an Instance now in `state` on (running) or off (stopped; not standby, which is
/// still billed).
pub fn instance_to(
    node: &str,
    server: &Ref,
    state: &ServerState,
    on: bool,
) -> R<Transition<InstancePower, WaitInstance>> {
    let wait = |until| WaitInstance {
        node: node.to_owned(),
        server: server.clone(),
        until,
    };
    let power = |action| InstancePower {
        node: node.to_owned(),
        server: server.clone(),
        action,
    };
    use InstanceTarget::{Off, Running, Stopped, StoppedAfterStop};
    let steps = match (on, state) {
        (true, ServerState::Running) | (false, ServerState::Stopped) => {
            return Ok(Transition::none());
        }
        (true, s) if s.is_off() => (None, Some(ServerAction::PowerOn), Some(Running)),
        (true, ServerState::Starting) => (None, None, Some(Running)),
        (true, ServerState::Stopping) => (Some(Off), Some(ServerAction::PowerOn), Some(Running)),
        (false, ServerState::Running | ServerState::StoppedInPlace) => {
            (None, Some(ServerAction::PowerOff), Some(Stopped))
        }
        // A stop under way ends stopped, or stopped in place (a shutdown from inside the
        // guest), which is then powered off.
        (false, ServerState::Stopping) => (None, None, Some(StoppedAfterStop)),
        (false, ServerState::Starting) => {
            (Some(Running), Some(ServerAction::PowerOff), Some(Stopped))
        }
        (_, other) => {
            return Err(InfraError::CannotPower {
                what: "Instance",
                name: node.to_owned(),
                state: other.to_string(),
            });
        }
    };
    Ok(Transition::of(steps, wait, power))
}

/// What brings an Elastic Metal server now in `status` on (ready) or off (stopped), as
/// [`instance_to`] does for an Instance.
pub fn worker_to(
    name: &str,
    server: &Ref,
    status: &ServerStatus,
    on: bool,
) -> R<Transition<WorkerPower, WaitWorker>> {
    let wait = |status| WaitWorker {
        name: name.to_owned(),
        server: server.clone(),
        status,
    };
    let power = |action| WorkerPower {
        name: name.to_owned(),
        server: server.clone(),
        action,
    };
    use ServerStatus::{Delivering, Ordered, Ready, Starting, Stopped, Stopping};
    let steps = match (on, status) {
        (true, Ready) | (false, Stopped) => return Ok(Transition::none()),
        (true, Stopped) => (None, Some(WorkerAction::Start), Some(Ready)),
        // An order or a start under way ends ready.
        (true, Delivering | Ordered | Starting) => (None, None, Some(Ready)),
        (true, Stopping) => (Some(Stopped), Some(WorkerAction::Start), Some(Ready)),
        (false, Ready) => (None, Some(WorkerAction::Stop), Some(Stopped)),
        (false, Stopping) => (None, None, Some(Stopped)),
        (false, Delivering | Ordered | Starting) => {
            (Some(Ready), Some(WorkerAction::Stop), Some(Stopped))
        }
        (_, other) => {
            return Err(InfraError::CannotPower {
                what: "Elastic Metal server",
                name: name.to_owned(),
                state: other.to_string(),
            });
        }
    };
    Ok(Transition::of(steps, wait, power))
}

/// Which servers of the cluster a command acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Nodes {
    /// The control planes (Instances).
    Controlplane,
    /// The Elastic Metal worker.
    Worker,
    All,
}

impl Nodes {
    fn control_planes(self) -> bool {
        self != Nodes::Worker
    }
    fn worker(self) -> bool {
        self != Nodes::Controlplane
    }
}

/// The cluster's servers of `nodes`, found by their tags in the project.
fn servers(
    cluster: &Cluster<'_>,
    nodes: Nodes,
) -> R<(Vec<instance::Server>, Vec<baremetal::Server>)> {
    let names = cluster.names();
    let zone = cluster.zone();
    let instances = if nodes.control_planes() {
        cluster
            .api
            .instance()
            .servers(zone, &names.tags(Role::Controlplane))?
    } else {
        Vec::new()
    };
    let workers = if nodes.worker() {
        cluster
            .api
            .baremetal()
            .servers(zone, &names.tags(Role::Worker))?
    } else {
        Vec::new()
    };
    Ok((instances, workers))
}

/// Where the cluster's servers are, together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Power {
    /// Every server runs.
    Running,
    /// Every server is off (an Instance stopped or in standby, the worker stopped).
    Stopped,
    /// There is no server.
    Absent,
    /// Some run, some do not, or one is changing state.
    Mixed,
}

impl Power {
    pub fn as_str(self) -> &'static str {
        match self {
            Power::Running => "running",
            Power::Stopped => "stopped",
            Power::Absent => "absent",
            Power::Mixed => "mixed",
        }
    }
}

/// Where the servers of `nodes` are (reads only).
pub fn state(cluster: &Cluster<'_>, nodes: Nodes) -> R<Power> {
    let (instances, workers) = servers(cluster, nodes)?;
    let on = instances
        .iter()
        .map(|s| s.state == ServerState::Running)
        .chain(workers.iter().map(|w| w.status == ServerStatus::Ready));
    let off = instances
        .iter()
        .map(|s| s.state.is_off())
        .chain(workers.iter().map(|w| w.status == ServerStatus::Stopped));
    let (on, off): (Vec<bool>, Vec<bool>) = (on.collect(), off.collect());
    Ok(if on.is_empty() {
        Power::Absent
    } else if on.iter().all(|x| *x) {
        Power::Running
    } else if off.iter().all(|x| *x) {
        Power::Stopped
    } else {
        Power::Mixed
    })
}

/// The public IPv4 of each server of `nodes` that runs (reads only): where Talos's API shuts
/// it down. A server changing state, or off, is not listed.
pub fn running_addresses(cluster: &Cluster<'_>, nodes: Nodes) -> R<Vec<Ipv4Addr>> {
    let (instances, workers) = servers(cluster, nodes)?;
    let no_address = |name: &str| InfraError::NoPublicIpv4 {
        name: name.to_owned(),
    };
    let instances = instances
        .iter()
        .filter(|s| s.state == ServerState::Running)
        .map(|s| {
            crate::apply::control_plane_ipv4(Some(s), None).ok_or_else(|| no_address(&s.name))
        });
    let workers = workers
        .iter()
        .filter(|w| w.status == ServerStatus::Ready)
        .map(|w| w.ipv4().ok_or_else(|| no_address(&w.name)));
    instances.chain(workers).collect()
}

/// For every server of `nodes` that is not in the target state: the waits for the changes under
/// way, then the actions, then the waits for their ends, so the machines change state together.
pub fn plan(cluster: &Cluster<'_>, on: bool, nodes: Nodes) -> R<Steps<PowerStep>> {
    let (instances, workers) = servers(cluster, nodes)?;
    if instances.is_empty() && workers.is_empty() {
        return Err(InfraError::NothingToPower {
            tag: cluster.names().cluster_tag(),
        });
    }
    let (mut before, mut actions, mut after) = (Vec::new(), Vec::new(), Vec::new());
    for s in &instances {
        let t = instance_to(&s.name, &Ref::Existing(s.id.clone()), &s.state, on)?;
        before.extend(t.before.map(PowerStep::WaitInstance));
        actions.extend(t.action.map(PowerStep::PowerInstance));
        after.extend(t.after.map(PowerStep::WaitInstance));
    }
    for w in &workers {
        let t = worker_to(&w.name, &Ref::Existing(w.id.clone()), &w.status, on)?;
        before.extend(t.before.map(PowerStep::WaitWorker));
        actions.extend(t.action.map(PowerStep::PowerWorker));
        after.extend(t.after.map(PowerStep::WaitWorker));
    }
    let mut steps = Steps::default();
    steps.extend(before);
    steps.extend(actions);
    steps.extend(after);
    Ok(steps)
}

/// Runs the steps of [`plan`], in order.
pub fn execute(cluster: &Cluster<'_>, steps: &Steps<PowerStep>) -> R<()> {
    // Power steps only name servers that exist.
    let created = Created::default();
    for (n, step) in steps.numbered() {
        match step {
            PowerStep::PowerInstance(s) => s.execute(cluster, &created, n)?,
            PowerStep::PowerWorker(s) => s.execute(cluster, &created, n)?,
            PowerStep::WaitInstance(s) => drop(s.execute(cluster, &created, n)?),
            PowerStep::WaitWorker(s) => drop(s.execute(cluster, &created, n)?),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The transition as `(wait before, action, wait after)`, in words.
    fn instance(state: ServerState, on: bool) -> (Option<String>, Option<String>, Option<String>) {
        let t = instance_to("cp", &Ref::Existing("i".into()), &state, on).unwrap();
        (
            t.before.map(|w| w.until.to_string()),
            t.action.map(|p| p.action.to_string()),
            t.after.map(|w| w.until.to_string()),
        )
    }

    fn worker(status: ServerStatus, on: bool) -> (Option<String>, Option<String>, Option<String>) {
        let t = worker_to("w", &Ref::Existing("w".into()), &status, on).unwrap();
        (
            t.before.map(|w| w.status.to_string()),
            t.action.map(|p| format!("{:?}", p.action)),
            t.after.map(|w| w.status.to_string()),
        )
    }

    fn s(x: &str) -> Option<String> {
        Some(x.to_owned())
    }

    #[test]
    fn an_instance_is_only_waited_for_into_a_state_that_something_under_way_or_sent_leads_to() {
        use ServerState::*;
        assert_eq!(instance(Running, true), (None, None, None));
        assert_eq!(instance(Stopped, true), (None, s("poweron"), s("running")));
        assert_eq!(
            instance(StoppedInPlace, true),
            (None, s("poweron"), s("running"))
        );
        assert_eq!(instance(Starting, true), (None, None, s("running")));
        assert_eq!(
            instance(Stopping, true),
            (s("stopped or stopped in place"), s("poweron"), s("running"))
        );
        assert_eq!(instance(Stopped, false), (None, None, None));
        assert_eq!(
            instance(Running, false),
            (None, s("poweroff"), s("stopped"))
        );
        assert_eq!(
            instance(StoppedInPlace, false),
            (None, s("poweroff"), s("stopped"))
        );
        assert_eq!(
            instance(Stopping, false),
            (
                None,
                None,
                s("stopped (powered off if the stop under way ends in place)")
            )
        );
        assert_eq!(
            instance(Starting, false),
            (s("running"), s("poweroff"), s("stopped"))
        );
        assert!(instance_to("cp", &Ref::Existing("i".into()), &Locked, true).is_err());
    }

    #[test]
    fn a_worker_is_only_waited_for_into_a_state_that_something_under_way_or_sent_leads_to() {
        use ServerStatus::*;
        assert_eq!(worker(Ready, true), (None, None, None));
        assert_eq!(worker(Stopped, true), (None, s("Start"), s("ready")));
        assert_eq!(worker(Delivering, true), (None, None, s("ready")));
        assert_eq!(
            worker(Stopping, true),
            (s("stopped"), s("Start"), s("ready"))
        );
        assert_eq!(worker(Stopped, false), (None, None, None));
        assert_eq!(worker(Ready, false), (None, s("Stop"), s("stopped")));
        assert_eq!(
            worker(Starting, false),
            (s("ready"), s("Stop"), s("stopped"))
        );
        for stuck in [Error, OutOfStock, Locked, Deleting, Unknown] {
            assert!(worker_to("w", &Ref::Existing("w".into()), &stuck, true).is_err());
        }
    }
}
