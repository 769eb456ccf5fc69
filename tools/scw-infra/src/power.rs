//! `power on|off`: the plan sends every action first (Instances `poweron`/`poweroff`, never
//! standby, which is still billed; Elastic Metal `start`/`stop`), then waits for each target
//! state, so the machines change state together. The action and wait steps are shared with
//! `apply`, which powers on what it finds stopped.

use scaleway::baremetal::{self, ServerStatus};
use scaleway::instance::{self, ServerAction, ServerState};
use serde::Serialize;

use crate::cluster::Cluster;
use crate::error::InfraError;
use crate::plan::{Created, Ref, Steps};
use crate::tags::Role;
use crate::wait;

type R<T> = Result<T, InfraError>;

/// An Instance action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstancePower {
    pub node: String,
    pub server: Ref,
    pub action: ServerAction,
}

/// Waiting for an Instance to reach a state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitInstance {
    pub node: String,
    pub server: Ref,
    pub state: ServerState,
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
        wait::instance(cluster, &id, &self.node, &self.state)
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

/// What brings an Instance now in `state` on (or off): the action, when the state is one the
/// action starts from, and the wait for the target state; nothing when it is there already (a
/// server changing state is only waited for).
pub fn instance_to(
    node: &str,
    server: &Ref,
    state: &ServerState,
    on: bool,
) -> (Option<InstancePower>, Option<WaitInstance>) {
    let (action, target, from) = if on {
        (ServerAction::PowerOn, ServerState::Running, state.is_off())
    } else {
        (
            ServerAction::PowerOff,
            ServerState::Stopped,
            matches!(state, ServerState::Running | ServerState::StoppedInPlace),
        )
    };
    if *state == target {
        return (None, None);
    }
    let power = from.then(|| InstancePower {
        node: node.to_owned(),
        server: server.clone(),
        action,
    });
    let wait = WaitInstance {
        node: node.to_owned(),
        server: server.clone(),
        state: target,
    };
    (power, Some(wait))
}

/// What brings an Elastic Metal server now in `status` on (ready) or off (stopped), as
/// [`instance_to`] does for an Instance.
pub fn worker_to(
    name: &str,
    server: &Ref,
    status: &ServerStatus,
    on: bool,
) -> (Option<WorkerPower>, Option<WaitWorker>) {
    let (action, target, from) = if on {
        (
            WorkerAction::Start,
            ServerStatus::Ready,
            ServerStatus::Stopped,
        )
    } else {
        (
            WorkerAction::Stop,
            ServerStatus::Stopped,
            ServerStatus::Ready,
        )
    };
    if *status == target {
        return (None, None);
    }
    let power = (*status == from).then(|| WorkerPower {
        name: name.to_owned(),
        server: server.clone(),
        action,
    });
    let wait = WaitWorker {
        name: name.to_owned(),
        server: server.clone(),
        status: target,
    };
    (power, Some(wait))
}

/// The actions, then the waits, for every server of the cluster that is not in the target
/// state: the machines change state together.
pub fn plan(cluster: &Cluster<'_>, on: bool) -> R<Steps<PowerStep>> {
    let zone = cluster.zone();
    let names = cluster.names();
    let servers = cluster
        .api
        .instance()
        .servers(zone, &names.tags(Role::Controlplane))?;
    let workers = cluster
        .api
        .baremetal()
        .servers(zone, &names.tags(Role::Worker))?;
    if servers.is_empty() && workers.is_empty() {
        return Err(InfraError::NothingToPower {
            tag: names.cluster_tag(),
        });
    }
    let mut steps = Steps::default();
    let mut waits = Vec::new();
    for s in &servers {
        let (power, wait) = instance_to(&s.name, &Ref::Existing(s.id.clone()), &s.state, on);
        steps.extend(power.map(PowerStep::PowerInstance));
        waits.extend(wait.map(PowerStep::WaitInstance));
    }
    for w in &workers {
        let (power, wait) = worker_to(&w.name, &Ref::Existing(w.id.clone()), &w.status, on);
        steps.extend(power.map(PowerStep::PowerWorker));
        waits.extend(wait.map(PowerStep::WaitWorker));
    }
    steps.extend(waits);
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
