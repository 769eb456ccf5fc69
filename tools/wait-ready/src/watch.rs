//! The Kubernetes side: list once, then watch from that resourceVersion until a condition holds,
//! resuming the watch where it stopped; a refused connection or a 5xx is retried after a bounded
//! exponential backoff until the deadline.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{ListParams, ObjectList, Patch, PatchParams, WatchEvent, WatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use pop_common::{debug, info};
use serde::de::DeserializeOwned;
use tokio::time::{Instant, sleep, timeout, timeout_at};

use crate::state::{
    NodeView, PodView, Summary, blocking, failed_but_done, node_view, pod_view, to_uncordon,
};
use crate::{Config, Error};

/// How long one watch may stay open before the API server ends it (it is then resumed).
const WATCH_SECONDS: u32 = 290;
/// How many stuck pods get their last event looked up after a timeout (one request each).
const EVENTS_FOR_AT_MOST: usize = 20;

/// The objects of one kind as last seen, and where the watch resumes.
struct Cache<K> {
    objects: BTreeMap<String, K>,
    /// None until the first successful list (or after a 410 Gone: list again).
    resource_version: Option<String>,
    /// The last error met while the API server was not answering.
    last_error: Option<String>,
}

impl<K: Resource + Clone> Cache<K> {
    fn new() -> Self {
        Cache {
            objects: BTreeMap::new(),
            resource_version: None,
            last_error: None,
        }
    }

    fn key(object: &K) -> String {
        match object.meta().namespace.as_deref() {
            Some(ns) => format!("{ns}/{}", object.meta().name.as_deref().unwrap_or_default()),
            None => object.meta().name.clone().unwrap_or_default(),
        }
    }

    fn replace(&mut self, list: ObjectList<K>) {
        self.objects = list.items.into_iter().map(|o| (Self::key(&o), o)).collect();
        self.resource_version = list.metadata.resource_version;
    }

    fn upsert(&mut self, object: K) {
        if let Some(rv) = object.meta().resource_version.clone() {
            self.resource_version = Some(rv);
        }
        self.objects.insert(Self::key(&object), object);
    }

    fn remove(&mut self, object: &K) {
        if let Some(rv) = object.meta().resource_version.clone() {
            self.resource_version = Some(rv);
        }
        self.objects.remove(&Self::key(object));
    }
}

/// The delay between two attempts while the API server does not answer: 250 ms doubling to 5 s.
struct Backoff(u32);

impl Backoff {
    async fn wait(&mut self) {
        let delay = Duration::from_millis(250).saturating_mul(1 << self.0.min(5));
        self.0 += 1;
        sleep(delay.min(Duration::from_secs(5))).await;
    }
}

/// Worth retrying: the server is not there yet (connection refused, reset, TLS not up) or says it
/// is overloaded or starting (5xx, 429). Anything else (401, 403, 404, a bad body) is final.
fn transient(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) => status.code >= 500 || status.code == 429,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

fn note<K>(cache: &mut Cache<K>, what: &str, err: &kube::Error) {
    let message = pop_common::exit::with_causes(err);
    if cache.last_error.as_deref() != Some(message.as_str()) {
        info!(
            "{what}: the API server does not answer yet ({message}); retrying until the deadline"
        );
    }
    cache.last_error = Some(message);
}

/// Lists then watches `api` into `cache` until `done` holds. Returns only when it holds or on a
/// final error; the caller bounds it with the deadline.
async fn watch_until<K, F>(
    api: &Api<K>,
    what: &str,
    cache: &mut Cache<K>,
    done: F,
) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + 'static,
    F: Fn(&BTreeMap<String, K>) -> bool,
{
    let mut backoff = Backoff(0);
    loop {
        let Some(version) = cache.resource_version.clone() else {
            match api.list(&ListParams::default()).await {
                Ok(list) => {
                    cache.replace(list);
                    cache.last_error = None;
                    backoff = Backoff(0);
                }
                Err(err) if transient(&err) => {
                    note(cache, what, &err);
                    backoff.wait().await;
                }
                Err(err) => return Err(Error::Api(format!("listing {what}: {err}"))),
            }
            continue;
        };
        if done(&cache.objects) {
            return Ok(());
        }
        let params = WatchParams::default().timeout(WATCH_SECONDS);
        let stream = match api.watch(&params, &version).await {
            Ok(stream) => stream,
            Err(err) if transient(&err) => {
                note(cache, what, &err);
                backoff.wait().await;
                continue;
            }
            Err(err) => return Err(Error::Api(format!("watching {what}: {err}"))),
        };
        debug!("{what}: watching from resourceVersion {version}");
        let mut stream = std::pin::pin!(stream);
        let mut events = 0usize;
        while let Some(item) = stream.next().await {
            match item {
                Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => cache.upsert(o),
                Ok(WatchEvent::Deleted(o)) => cache.remove(&o),
                Ok(WatchEvent::Bookmark(b)) => {
                    cache.resource_version = Some(b.metadata.resource_version);
                }
                Ok(WatchEvent::Error(status)) if status.code == 410 => {
                    // Too old a resourceVersion: list again.
                    debug!("{what}: resourceVersion expired, listing again");
                    cache.resource_version = None;
                    break;
                }
                Ok(WatchEvent::Error(status)) => {
                    return Err(Error::Api(format!("watching {what}: {}", status.message)));
                }
                Err(err) => {
                    // The stream broke (the server went away): resume from the last version.
                    note(cache, what, &err);
                    break;
                }
            }
            events += 1;
            cache.last_error = None;
            if done(&cache.objects) {
                return Ok(());
            }
        }
        if events == 0 && cache.resource_version.is_some() {
            // Ended without a single event (and not for a 410, which lists again at once): do
            // not hammer a server that closes at once.
            backoff.wait().await;
        } else {
            backoff = Backoff(0);
        }
    }
}

async fn connect(path: &Path) -> Result<Client, Error> {
    let bad = |message: String| Error::Kubeconfig {
        path: path.to_path_buf(),
        message,
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| bad(e.to_string()))?;
    info!("API server {}", config.cluster_url);
    Client::try_from(config).map_err(|e| bad(e.to_string()))
}

/// When the whole wait ends, and how long that was, for the error that names what is stuck.
#[derive(Clone, Copy)]
struct Deadline {
    at: Instant,
    waited: Duration,
}

impl Deadline {
    fn timed_out(self, stuck: String) -> Error {
        Error::Timeout {
            waited: self.waited,
            stuck,
        }
    }
}

pub(crate) async fn wait(config: &Config) -> Result<Summary, Error> {
    let started = Instant::now();
    let deadline = Deadline {
        at: started + config.timeout,
        waited: config.timeout,
    };
    let client = connect(&config.kubeconfig).await?;
    let nodes_api: Api<Node> = Api::all(client.clone());
    let mut nodes = Cache::new();
    let views = nodes_ready(&nodes_api, &mut nodes, deadline).await?;
    let targets = to_uncordon(&views, &config.uncordon).map_err(Error::UnknownNode)?;
    for name in &targets {
        uncordon(&nodes_api, &mut nodes, name, deadline).await?;
    }
    let still_cordoned = left_cordoned(&views, &targets);
    let pods = pods_serving(&client, deadline).await?;
    let views = pod_views(&pods.objects);
    let summary = Summary {
        kind: Default::default(),
        version: Default::default(),
        nodes_ready: nodes.objects.len(),
        uncordoned: targets,
        still_cordoned,
        pods_running: views.iter().filter(|p| p.serving()).count(),
        pods_succeeded: views
            .iter()
            .filter(|p| p.phase == "Succeeded" && !p.finished_job)
            .count(),
        finished_job_pods_ignored: views.iter().filter(|p| p.finished_job).count(),
        failed_pods_ignored: failed_but_done(&views),
        waited_seconds: started.elapsed().as_secs(),
    };
    info!(
        "ready: {} nodes, {} pods Running, {} Succeeded",
        summary.nodes_ready, summary.pods_running, summary.pods_succeeded
    );
    Ok(summary)
}

/// Step 1: every node Ready.
async fn nodes_ready(
    nodes_api: &Api<Node>,
    nodes: &mut Cache<Node>,
    deadline: Deadline,
) -> Result<BTreeMap<String, NodeView>, Error> {
    info!("waiting for every node to be Ready");
    let all_ready = |objects: &BTreeMap<String, Node>| {
        !objects.is_empty() && objects.values().all(|n| node_view(n).ready)
    };
    let watched = watch_until(nodes_api, "nodes", nodes, all_ready);
    match timeout_at(deadline.at, watched).await {
        Ok(result) => result?,
        Err(_) => return Err(deadline.timed_out(stuck_nodes(nodes))),
    }
    let views: BTreeMap<String, NodeView> = nodes
        .objects
        .values()
        .map(|n| (n.name_any(), node_view(n)))
        .collect();
    info!("{} nodes Ready", views.len());
    Ok(views)
}

/// Step 2, for one node asked for: a merge patch, retried while the API server's answer is
/// transient.
async fn uncordon(
    nodes_api: &Api<Node>,
    nodes: &mut Cache<Node>,
    name: &str,
    deadline: Deadline,
) -> Result<(), Error> {
    info!("uncordoning node {name}");
    let patch = Patch::Merge(serde_json::json!({"spec": {"unschedulable": false}}));
    let params = PatchParams::default();
    let mut backoff = Backoff(0);
    loop {
        let attempt = timeout_at(deadline.at, nodes_api.patch(name, &params, &patch));
        match attempt.await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(err)) if transient(&err) => {
                note(nodes, "uncordon", &err);
                if timeout_at(deadline.at, backoff.wait()).await.is_err() {
                    let stuck = format!("node {name} is still cordoned: {err}");
                    return Err(deadline.timed_out(stuck));
                }
            }
            Ok(Err(err)) => return Err(Error::Api(format!("uncordoning {name}: {err}"))),
            Err(_) => return Err(deadline.timed_out(format!("node {name} is still cordoned"))),
        }
    }
}

/// The cordoned nodes nobody asked to uncordon: said, and left so.
fn left_cordoned(views: &BTreeMap<String, NodeView>, targets: &[String]) -> Vec<String> {
    let still_cordoned: Vec<String> = views
        .values()
        .filter(|v| v.unschedulable && !targets.contains(&v.name))
        .map(|v| v.name.clone())
        .collect();
    if !still_cordoned.is_empty() {
        info!(
            "left cordoned (not asked to uncordon them): {}",
            still_cordoned.join(", ")
        );
    }
    still_cordoned
}

/// Step 3: every pod Running and Ready, or done with.
async fn pods_serving(client: &Client, deadline: Deadline) -> Result<Cache<Pod>, Error> {
    let pods_api: Api<Pod> = Api::all(client.clone());
    let mut pods = Cache::new();
    info!(
        "waiting for every pod to be Running and Ready (finished Job, evicted, shut-down and \
         replaced pods aside)"
    );
    let none_blocks = |objects: &BTreeMap<String, Pod>| blocking(&pod_views(objects)).is_empty();
    let watched = watch_until(&pods_api, "pods", &mut pods, none_blocks);
    match timeout_at(deadline.at, watched).await {
        Ok(result) => result?,
        Err(_) => return Err(deadline.timed_out(stuck_pods(client, &pods).await)),
    }
    Ok(pods)
}

fn pod_views(pods: &BTreeMap<String, Pod>) -> Vec<PodView> {
    pods.values().map(pod_view).collect()
}

fn unreachable<K>(cache: &Cache<K>, what: &str) -> Option<String> {
    match (&cache.resource_version, &cache.last_error) {
        (None, Some(err)) => Some(format!("the API server never listed the {what}: {err}")),
        (None, None) => Some(format!("the API server never listed the {what}")),
        _ => None,
    }
}

fn stuck_nodes(nodes: &Cache<Node>) -> String {
    if let Some(why) = unreachable(nodes, "nodes") {
        return why;
    }
    let stuck: Vec<String> = nodes
        .objects
        .values()
        .map(node_view)
        .filter(|v| !v.ready)
        .map(|v| format!("node {} not Ready ({})", v.name, v.why))
        .collect();
    if stuck.is_empty() {
        "no node is registered".to_owned()
    } else {
        stuck.join("; ")
    }
}

async fn stuck_pods(client: &Client, pods: &Cache<Pod>) -> String {
    if let Some(why) = unreachable(pods, "pods") {
        return why;
    }
    let mut lines = Vec::new();
    let views = pod_views(&pods.objects);
    for (i, pod) in blocking(&views).iter().enumerate() {
        let mut line = format!("pod {} ({})", pod.key(), pod.why);
        if i < EVENTS_FOR_AT_MOST
            && let Some(event) = last_event(client, &pod.namespace, &pod.name).await
        {
            line.push_str(&format!("; last event: {event}"));
        }
        lines.push(line);
    }
    lines.join("; ")
}

/// The pod's most recent event, `Reason: message` (one bounded request; None if it fails).
async fn last_event(client: &Client, namespace: &str, name: &str) -> Option<String> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().fields(&format!(
        "involvedObject.kind=Pod,involvedObject.name={name}"
    ));
    let list = timeout(Duration::from_secs(5), api.list(&params))
        .await
        .ok()?
        .ok()?;
    let when = |e: &Event| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.event_time.as_ref().map(|t| t.0))
            .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
    };
    let event = list.items.into_iter().max_by_key(when)?;
    Some(format!(
        "{}: {}",
        event.reason.unwrap_or_default(),
        event.message.unwrap_or_default()
    ))
}
