//! pow-filter: the Proxy-Wasm glue (wasm32-wasip1, ABI v0.2.1) around `pow-core`.
//!
//! Thin on purpose: `on_configure` decodes the pluginConfig into a [`pow_core::Filter`] (a bad
//! one is logged and refused), reads the HMAC secrets from the VM environment, defines the
//! metrics; `on_http_request_headers` gathers the headers and `source.address`, asks the core,
//! and sends the local response it returns. Any hostcall failure lets the request through,
//! bumps `pow_fail_open` and logs at a bounded rate: the filter never turns a request into a 5xx.
//! The SDK provides the context dispatch and the allocator; hostcalls go through [`abi`], which
//! never panics.

mod abi;

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType};

use abi::Level;
use pow_core::decision_log::DecisionEvent;
use pow_core::filter::metric;
use pow_core::log_limit::LogLimiter;
use pow_core::secrets::{self, Severity};
use pow_core::seen::{SharedStore, StoreError};
use pow_core::{Filter, Metrics, Now, PluginConfig, Request};

/// The SDK's entry point (`_initialize`): registers the root context and sends panics, which
/// should never happen, to the host log before the VM aborts.
#[allow(unsafe_code)] // the SDK's macro exports `_initialize` with `#[no_mangle]`
mod entry {
    proxy_wasm::main! {{
        std::panic::set_hook(Box::new(|info| {
            let _ = crate::abi::log(crate::abi::Level::Critical, &format!("pow-filter panic: {info}"));
        }));
        proxy_wasm::set_root_context(|_| Box::new(crate::Root::default()));
    }}
}

const VERSION: &str = env!("CARGO_PKG_VERSION");

thread_local! {
    static LOG_LIMITER: Cell<LogLimiter> = Cell::new(LogLimiter::default());
    /// Decision lines have a limiter of their own: a flood of challenges never hides a
    /// failing-open line, nor the other way round.
    static DECISION_LIMITER: Cell<LogLimiter> =
        const { Cell::new(LogLimiter::new(pow_core::decision_log::INTERVAL_SECS)) };
}

/// Logs at a bounded rate (see [`LogLimiter`]).
fn log_bounded(level: Level, now_secs: u64, message: &str) {
    LOG_LIMITER.with(|cell| {
        let mut limiter = cell.get();
        if let Some(line) = limiter.admit(now_secs, message) {
            let _ = abi::log(level, &line);
        }
        cell.set(limiter);
    });
}

fn now_secs_or_zero() -> u64 {
    abi::now_nanos().map_or(0, |n| n / 1_000_000_000)
}

/// Counter and gauge ids, defined on first use.
#[derive(Debug, Default)]
struct MetricIds {
    ids: HashMap<String, u32, pow_core::fnv::FnvBuild>,
}

impl MetricIds {
    fn id(&mut self, kind: u32, name: &str) -> Option<u32> {
        if let Some(id) = self.ids.get(name) {
            return Some(*id);
        }
        match abi::define_metric(kind, name) {
            Ok(id) => {
                self.ids.insert(name.to_owned(), id);
                Some(id)
            }
            Err(s) => {
                log_bounded(
                    Level::Warn,
                    now_secs_or_zero(),
                    &format!(
                        "pow-filter: define_metric({name}) failed with status {}",
                        s.0
                    ),
                );
                None
            }
        }
    }

    fn gauge(&mut self, name: &str, value: u64) {
        if let Some(id) = self.id(abi::METRIC_GAUGE, name) {
            let _ = abi::record_metric(id, value);
        }
    }
}

impl Metrics for MetricIds {
    fn increment(&mut self, name: &str) {
        if let Some(id) = self.id(abi::METRIC_COUNTER, name) {
            let _ = abi::increment_metric(id, 1);
        }
    }

    fn record(&mut self, name: &str, value: u64) {
        if let Some(id) = self.id(abi::METRIC_HISTOGRAM, name) {
            let _ = abi::record_metric(id, value);
        }
    }

    fn decision<'e>(&mut self, event: &dyn Fn() -> DecisionEvent<'e>) {
        let now = now_secs_or_zero();
        DECISION_LIMITER.with(|cell| {
            let mut limiter = cell.get();
            if let Some(suppressed) = limiter.admit_count(now) {
                let _ = abi::log(Level::Info, &event().to_json(suppressed));
            }
            cell.set(limiter);
        });
    }
}

/// The shared data, for the seen-set.
struct HostStore;

impl SharedStore for HostStore {
    fn get(&mut self, key: &str) -> Result<Option<(Vec<u8>, u32)>, StoreError> {
        abi::get_shared_data(key).map_err(|_| StoreError::Failed)
    }

    fn set(&mut self, key: &str, value: &[u8], cas: u32) -> Result<(), StoreError> {
        abi::set_shared_data(key, value, cas).map_err(|s| {
            if s.0 == abi::CAS_MISMATCH {
                StoreError::CasMismatch
            } else {
                StoreError::Failed
            }
        })
    }
}

/// Shared by a root context and the HTTP contexts it creates.
#[derive(Debug, Default)]
struct Shared {
    filter: Option<Filter>,
    metrics: RefCell<MetricIds>,
    /// When the lists' age gauge was last written (Unix seconds).
    age_written: Cell<u64>,
}

impl Shared {
    fn write_age(&self, now_secs: u64) {
        let Some(filter) = &self.filter else { return };
        if let Some(at) = filter.lists.generated_at {
            let age = (now_secs as i64).saturating_sub(at).max(0) as u64;
            self.metrics.borrow_mut().gauge(metric::LISTS_AGE, age);
        }
        self.age_written.set(now_secs);
    }
}

/// One plugin configuration. Istio delivers a new pluginConfig (new lists) as a new root
/// context and a fresh `on_configure` in the same VM: the new table replaces the old one for
/// new requests, in-flight requests keep theirs.
#[derive(Debug, Default)]
struct Root {
    shared: Rc<Shared>,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_vm_start(&mut self, _vm_configuration_size: usize) -> bool {
        let _ = abi::log(Level::Info, &format!("pow-filter {VERSION} starting"));
        true
    }

    fn on_configure(&mut self, plugin_configuration_size: usize) -> bool {
        match configure(plugin_configuration_size) {
            Ok(shared) => {
                self.shared = Rc::new(shared);
                let _ = abi::set_tick_period_ms(30_000);
                true
            }
            Err(message) => {
                let mut m = MetricIds::default();
                m.increment(metric::CONFIG_REJECTED);
                let _ = abi::log(
                    Level::Error,
                    &format!("pow-filter: configuration refused: {message}"),
                );
                false
            }
        }
    }

    fn on_tick(&mut self) {
        self.shared.write_age(now_secs_or_zero());
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Http {
            shared: Rc::clone(&self.shared),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

/// Reads a secret from the VM environment (WasmPlugin `vmConfig.env`, `valueFrom: HOST`) as
/// bytes: a secret need not be UTF-8 (on WASI the encoded bytes are the variable's own).
fn env_secret(name: &str) -> Option<Vec<u8>> {
    std::env::var_os(name).map(std::ffi::OsString::into_encoded_bytes)
}

fn configure(size: usize) -> Result<Shared, String> {
    let bytes = abi::get_buffer(abi::BUFFER_PLUGIN_CONFIGURATION, size)
        .map_err(|s| {
            format!(
                "reading the plugin configuration failed with status {}",
                s.0
            )
        })?
        .unwrap_or_default();
    let config = PluginConfig::from_json_lists_unread(&bytes).map_err(|e| e.to_string())?;

    let choice = secrets::choose(&config, &env_secret);
    for notice in &choice.notices {
        let level = match notice.severity {
            Severity::Warn => Level::Warn,
            Severity::Critical => Level::Critical,
        };
        let _ = abi::log(level, &notice.text);
    }
    let keys = choice.keys;
    let seed = abi::random_bytes::<32>()
        .map_err(|s| format!("the VM's random source failed with errno {}", s.0))?;
    let filter = Filter::new(config, keys, seed)?;
    let shared = Shared::default();
    {
        let mut m = shared.metrics.borrow_mut();
        for name in filter.metric_names() {
            let _ = m.id(abi::METRIC_COUNTER, &name);
        }
        m.gauge(metric::SECRET_MISSING, u64::from(!filter.is_armed()));
        let lists = &filter.lists;
        let version_secs = pow_core::time::parse_rfc3339(&lists.version)
            .unwrap_or(0)
            .max(0);
        m.gauge(metric::LISTS_VERSION, version_secs as u64);
        m.gauge(
            metric::LISTS_GENERATED_AT,
            lists.generated_at.unwrap_or(0).max(0) as u64,
        );
        m.gauge(metric::LISTS_PREFIXES, lists.prefix_count() as u64);
        for (name, count) in lists.prefix_counts() {
            let gauge = metric::tagged(metric::LIST_PREFIXES, &[(metric::LIST, name)]);
            m.gauge(&gauge, count as u64);
        }
        let _ = m.id(abi::METRIC_HISTOGRAM, metric::SOLVE_SECONDS);
    }
    let now = now_secs_or_zero();
    pow_core::seen::start(&mut HostStore, now);
    let _ = abi::log(
        Level::Info,
        &format!(
            "pow-filter {VERSION}: mode {:?}, lists version `{}` ({} prefixes, {} KiB){}",
            filter.config.mode,
            filter.lists.version,
            filter.lists.prefix_count(),
            filter.lists.heap_bytes() / 1024,
            if filter.is_armed() {
                ""
            } else {
                ", NOT PROTECTING (no secret)"
            },
        ),
    );
    let shared = Shared {
        filter: Some(filter),
        ..shared
    };
    shared.write_age(now);
    Ok(shared)
}

struct Http {
    shared: Rc<Shared>,
}

impl Context for Http {}

impl HttpContext for Http {
    fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        let Some(filter) = &self.shared.filter else {
            strip_routing_overrides();
            // No configuration was accepted: nothing to decide with. Counted and said.
            self.shared
                .metrics
                .borrow_mut()
                .increment(metric::UNPROTECTED);
            log_bounded(
                Level::Critical,
                now_secs_or_zero(),
                "pow-filter: NOT PROTECTING: no accepted configuration; request passed",
            );
            return Action::Continue;
        };
        match self.decide(filter) {
            Ok(action) => action,
            Err((what, status)) => {
                strip_routing_overrides();
                let now = now_secs_or_zero();
                self.shared
                    .metrics
                    .borrow_mut()
                    .increment(metric::FAIL_OPEN);
                log_bounded(
                    Level::Error,
                    now,
                    &format!(
                        "pow-filter: failing open: {what} returned status {}",
                        status.0
                    ),
                );
                Action::Continue
            }
        }
    }
}

/// Removes the routing-override headers ([`pow_core::filter::STRIPPED_HEADERS`]) from a request
/// let through when its headers could not be read: a failure here changes nothing more.
fn strip_routing_overrides() {
    for name in pow_core::filter::STRIPPED_HEADERS {
        let _ = abi::remove_request_header(name);
    }
}

/// The request's headers as the filter reads them, borrowed from the proxy's `map`, and the
/// routing-override headers it carries (removed if it is let through). Only the headers the
/// core reads are decoded, each up to the bytes that matter, and the Cookie header not at all
/// (the core scans its bytes for the clearance pairs): a request carrying 60 KiB in any header
/// then costs a scan of the names, not a UTF-8 validation and a copy of all of it. Envoy's
/// header names are lowercase (HTTP/2 requires it; its HTTP/1 codec lowers them), so they are
/// compared as they are. `None` when the map is malformed.
fn read_headers<'m>(filter: &Filter, map: &'m [u8]) -> Option<(Request<'m>, Vec<&'static str>)> {
    let mut overrides: Vec<&'static str> = Vec::new();
    let mut cookies: Vec<&[u8]> = Vec::new();
    let headers = abi::deserialize_map_with(map, |name, value| {
        if name == b"cookie" {
            cookies.push(value);
            return None;
        }
        if let Some(limit) = filter.read_limit(name) {
            let kept = value.get(..limit).unwrap_or(value);
            return Some(pow_core::filter::utf8_lossy(kept));
        }
        if let Some(stripped) = pow_core::filter::STRIPPED_HEADERS
            .iter()
            .find(|s| s.as_bytes() == name)
            && !overrides.contains(stripped)
        {
            overrides.push(stripped);
        }
        None
    })?;
    let mut req = Request {
        headers,
        cookies,
        source_address: None,
    };
    // The fields a Web Bot Auth signature covers, read only when there is one to check.
    let covered = filter.covered_fields(&req);
    if !covered.is_empty() {
        let mut lines = 0;
        let limit = pow_core::web_bot_auth::MAX_FIELD_LEN + 1;
        let more = abi::deserialize_map_with(map, |name, value| {
            let wanted = lines < pow_core::filter::MAX_COVERED_LINES
                && covered.iter().any(|c| c.as_bytes() == name);
            wanted.then(|| {
                lines += 1;
                pow_core::filter::utf8_lossy(value.get(..limit).unwrap_or(value))
            })
        })?;
        req.headers.extend(more);
    }
    Some((req, overrides))
}

impl Http {
    fn decide(&self, filter: &Filter) -> Result<Action, (&'static str, abi::Status)> {
        let map = abi::get_request_header_map().map_err(|s| ("get_header_map_pairs", s))?;
        let (mut req, overrides) = read_headers(filter, &map)
            .ok_or(("get_header_map_pairs (malformed map)", abi::Status(3)))?;
        let source = abi::get_property(b"source\0address")
            .map_err(|s| ("get_property(source.address)", s))?
            .map(|b| {
                Cow::Owned(
                    String::from_utf8(b)
                        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
                )
            });
        let nanos = abi::now_nanos().map_err(|s| ("get_current_time_nanoseconds", s))?;
        let now = Now {
            secs: nanos / 1_000_000_000,
        };
        if now.secs >= self.shared.age_written.get().saturating_add(60) {
            self.shared.write_age(now.secs);
        }
        req.source_address = source;
        let action = {
            let mut metrics = self.shared.metrics.borrow_mut();
            if !filter.is_armed() {
                log_bounded(
                    Level::Critical,
                    now.secs,
                    "pow-filter: NOT PROTECTING: no usable HMAC secret; request passed",
                );
            }
            filter.on_request(&req, now, &mut HostStore, &mut *metrics)
        };
        match action {
            pow_core::Action::Continue(forward) => {
                for name in overrides {
                    abi::remove_request_header(name).map_err(|s| ("remove_header_map_value", s))?;
                }
                if let Some(path) = forward.path {
                    abi::replace_request_header(":path", &path)
                        .map_err(|s| ("replace_header_map_value(:path)", s))?;
                }
                if let Some(decision) = forward.decision {
                    abi::replace_request_header(pow_core::filter::DECISION_HEADER, &decision)
                        .map_err(|s| ("replace_header_map_value(pow-decision)", s))?;
                }
                Ok(Action::Continue)
            }
            pow_core::Action::Respond {
                status,
                headers,
                body,
            } => {
                abi::send_local_response(status, &headers, &body)
                    .map_err(|s| ("send_local_response", s))?;
                Ok(Action::Pause)
            }
        }
    }
}
