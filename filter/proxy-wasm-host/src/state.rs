//! What the host keeps between hostcalls: the VM-wide state (configuration buffers, clock,
//! logs, metrics, shared data) and the state of the one HTTP stream in flight.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{SystemTime, UNIX_EPOCH};

use wasmtime::{Memory, TypedFunc};

use crate::abi::metric;
use crate::host::HostConfig;

/// The most log lines kept; older ones are dropped (the demo runs for hours).
pub const MAX_LOGS: usize = 10_000;

/// One metric defined by the module.
#[derive(Debug, Clone)]
pub struct Metric {
    pub name: String,
    pub kind: i32,
    pub value: i64,
    /// A histogram's samples (`None` for a counter or a gauge).
    pub histogram: Option<crate::envoy_stats::Histogram>,
}

/// A response the module sent with `proxy_send_local_response`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalReply {
    pub status: u32,
    pub details: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The HTTP stream in flight (the host runs one at a time).
#[derive(Debug, Default)]
pub struct Stream {
    pub request_headers: Vec<(String, String)>,
    pub request_body: Vec<u8>,
    pub request_trailers: Vec<(String, String)>,
    pub response_headers: Vec<(String, String)>,
    pub response_body: Vec<u8>,
    pub response_trailers: Vec<(String, String)>,
    /// Read-only properties of the stream (`source.address`, `request.*`, `response.code`).
    pub properties: HashMap<String, Vec<u8>>,
    pub local: Option<LocalReply>,
    pub end_of_stream: bool,
}

/// The store's data: everything the hostcalls read and write.
pub struct State {
    /// What the VM was set up with; `plugin_config` changes on reconfigure, `fault` on
    /// `Host::set_fault`.
    pub config: HostConfig,
    pub manual_time: Option<u64>,
    pub tick_period_ms: u32,
    pub logs: VecDeque<(u32, String)>,
    pub metrics: Vec<Metric>,
    pub shared: HashMap<String, (Vec<u8>, u32)>,
    pub next_cas: u32,
    /// Shared queues by token - 1: name and pending items.
    pub queues: Vec<(String, VecDeque<Vec<u8>>)>,
    /// Properties the module set with `proxy_set_property`, VM-wide.
    pub set_properties: HashMap<String, Vec<u8>>,
    pub stream: Option<Stream>,
    pub memory: Option<Memory>,
    pub alloc: Option<TypedFunc<i32, i32>>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("root_id", &self.config.root_id)
            .field("manual_time", &self.manual_time)
            .field("metrics", &self.metrics)
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl State {
    /// A VM's state before its module runs: `config`'s clock, nothing logged, defined or shared.
    pub fn new(config: HostConfig) -> State {
        State {
            manual_time: config.time_nanos,
            config,
            tick_period_ms: 0,
            logs: VecDeque::new(),
            metrics: Vec::new(),
            shared: HashMap::new(),
            next_cas: 0,
            queues: Vec::new(),
            set_properties: HashMap::new(),
            stream: None,
            memory: None,
            alloc: None,
        }
    }

    pub fn now_nanos(&self) -> u64 {
        self.manual_time.unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        })
    }

    /// Whether the named hostcall is the one set to fail.
    pub fn faulty(&self, hostcall: &str) -> bool {
        self.config.fault.as_deref() == Some(hostcall)
    }

    pub fn log(&mut self, level: u32, message: String) {
        if self.config.echo_logs {
            echo(level, &message);
        }
        if self.logs.len() == MAX_LOGS {
            self.logs.pop_front();
        }
        self.logs.push_back((level, message));
    }

    pub fn metrics_by_name(&self) -> BTreeMap<String, i64> {
        self.metrics
            .iter()
            .map(|m| (m.name.clone(), m.value))
            .collect()
    }

    /// The token of the named queue (1-based), registering it when `create` is set.
    pub fn queue_token(&mut self, name: &str, create: bool) -> Option<u32> {
        let index = match self.queues.iter().position(|(n, _)| n == name) {
            Some(index) => index,
            None if create => {
                self.queues.push((name.to_owned(), VecDeque::new()));
                self.queues.len() - 1
            }
            None => return None,
        };
        u32::try_from(index + 1).ok()
    }

    /// Defines a metric, or returns the id of the one already defined under that name.
    pub fn define_metric(&mut self, kind: i32, name: String) -> Option<u32> {
        if !(metric::COUNTER..=metric::HISTOGRAM).contains(&kind) {
            return None;
        }
        if let Some(id) = self.metrics.iter().position(|m| m.name == name) {
            return u32::try_from(id).ok();
        }
        self.metrics.push(Metric {
            name,
            kind,
            value: 0,
            histogram: (kind == metric::HISTOGRAM).then(Default::default),
        });
        u32::try_from(self.metrics.len() - 1).ok()
    }
}

fn echo(level: u32, message: &str) {
    use crate::abi::log_level;
    match level {
        log_level::TRACE | log_level::DEBUG => pop_common::debug!("wasm: {message}"),
        log_level::INFO => pop_common::info!("wasm: {message}"),
        _ => pop_common::warn!("wasm: {message}"),
    }
}
