//! [`Host`]: one proxy-wasm VM running one module, driven the way Envoy drives it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use wasmtime::{Linker, Store, WasmParams, WasmResults};

use crate::abi::{self, action};
use crate::hostcalls;
use crate::state::{State, Stream};

mod engine;
mod envoy;

use engine::{Callback, Callbacks};
use envoy::stream_for;

/// How the VM is set up: what Istio's WasmPlugin would give it.
#[derive(Debug, Clone, Default)]
pub struct HostConfig {
    /// The `PLUGIN_CONFIGURATION` buffer (Istio: the `pluginConfig` as JSON).
    pub plugin_config: Vec<u8>,
    /// The `VM_CONFIGURATION` buffer (Istio leaves it empty).
    pub vm_config: Vec<u8>,
    /// The VM environment, read by WASI `environ_get` (Istio: `vmConfig.env`). Values are bytes:
    /// a real environment variable need not be UTF-8.
    pub env: Vec<(String, Vec<u8>)>,
    /// The name of a hostcall (e.g. `proxy_get_header_map_pairs`) that returns `INTERNAL_FAILURE`
    /// instead of working: to test that the module fails open.
    pub fault: Option<String>,
    /// What `proxy_get_log_level` answers (0 = trace, the default, so tests see everything).
    pub log_level: u32,
    /// Also print the module's logs on stderr (the demo does).
    pub echo_logs: bool,
    /// The root id (`plugin_root_id` property; Istio: the WasmPlugin's `pluginName`).
    pub root_id: String,
    /// Envoy's `xff_num_trusted_hops` (Istio: the gateway's `numTrustedProxies`): how many
    /// proxies in front of the gateway are trusted to append to `X-Forwarded-For`. The host
    /// derives the client address and sanitises `X-Forwarded-Proto` and `:scheme` from it, as
    /// Envoy does before any filter runs.
    pub xff_num_trusted_hops: u32,
    /// A fixed clock from the start, in nanoseconds since the Unix epoch (`None`: real time),
    /// as [`Host::set_time_nanos`] sets it later: `on_configure` already reads it.
    pub time_nanos: Option<u64>,
    /// Count the WebAssembly instructions the module runs (wasmtime fuel), for
    /// [`Host::instructions`]: a cost measure that does not depend on the machine's load.
    pub count_instructions: bool,
}

/// One HTTP request as the downstream sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The path with its query string, as in `:path`.
    pub path: String,
    pub authority: String,
    pub scheme: String,
    /// Regular headers (names are lower-cased on the way in, as Envoy does).
    pub headers: Vec<(String, String)>,
    /// The peer: `1.2.3.4:5678` or `[2001:db8::1]:5678` (the `source.address` property).
    pub source_address: String,
    pub body: Option<Vec<u8>>,
}

impl Default for Request {
    fn default() -> Self {
        Request {
            method: "GET".to_owned(),
            path: "/".to_owned(),
            authority: "localhost".to_owned(),
            scheme: "http".to_owned(),
            headers: Vec::new(),
            source_address: "127.0.0.1:40000".to_owned(),
            body: None,
        }
    }
}

impl Request {
    /// A GET of `path` with the defaults of [`Request::default`].
    pub fn get(path: &str) -> Request {
        Request {
            path: path.to_owned(),
            ..Request::default()
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sets the peer address.
    pub fn from_address(mut self, source_address: &str) -> Request {
        self.source_address = source_address.to_owned();
        self
    }
}

/// What the module decided about a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The request goes on upstream, with these (possibly modified) headers, pseudo-headers
    /// (`:method`, `:path`, `:authority`, `:scheme`) first.
    Continue { headers: Vec<(String, String)> },
    /// The module answered itself with `proxy_send_local_response`.
    Local {
        status: u32,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
}

/// An HTTP response (from the upstream, or the module's own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u32,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The end of a full exchange (request, upstream, response): who answered, and with what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Served {
    /// The module answered (during the request or the response phase).
    Local(Response),
    /// The upstream answered; `response` is after the module's response callbacks.
    Upstream {
        request_headers: Vec<(String, String)>,
        response: Response,
    },
}

/// Why the host could not load the module or run a callback.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("cannot read the module {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("not a valid wasm module: {0}")]
    Compile(String),
    #[error(
        "the module imports {module}.{name}, which this proxy-wasm v0.2.1 host does not provide"
    )]
    UnknownImport { module: String, name: String },
    #[error("not a proxy-wasm v0.2.1 module: {0}")]
    NotProxyWasm(String),
    #[error("instantiation failed: {0}")]
    Instantiate(String),
    #[error("the module trapped in {callback}: {message}")]
    Trap {
        callback: &'static str,
        message: String,
    },
    #[error("the VM crashed earlier ({0}) and is no longer usable, as in Envoy")]
    Crashed(String),
    #[error("{callback} returned false: the module refused its configuration")]
    Rejected { callback: &'static str },
    #[error("{callback} paused the stream without answering: this host has no way to resume it")]
    Paused { callback: &'static str },
}

/// A proxy-wasm VM running one module. Synchronous: one stream at a time.
#[derive(Debug)]
pub struct Host {
    store: Store<State>,
    calls: Callbacks,
    root: i32,
    next_context: i32,
    crashed: Option<String>,
}

impl Host {
    /// Loads the module at `wasm_path` and starts it as Envoy does: `_initialize`,
    /// `on_context_create(root, 0)`, `on_vm_start`, `on_configure`.
    pub fn load(wasm_path: &Path, config: HostConfig) -> Result<Host, HostError> {
        let bytes = std::fs::read(wasm_path).map_err(|source| HostError::Read {
            path: wasm_path.to_owned(),
            source,
        })?;
        Host::from_bytes(&bytes, config)
    }

    /// Same as [`Host::load`], from the module's bytes (binary or, in tests, text).
    pub fn from_bytes(bytes: &[u8], config: HostConfig) -> Result<Host, HostError> {
        let mut host = Host::instantiate(bytes, config)?;
        host.start()?;
        Ok(host)
    }

    /// Compiles and instantiates the module, refusing one that imports what this host does
    /// not provide or that is no proxy-wasm module; nothing of it has run yet.
    fn instantiate(bytes: &[u8], config: HostConfig) -> Result<Host, HostError> {
        let (engine, module) = engine::compile(bytes, config.count_instructions)?;
        let mut linker: Linker<State> = Linker::new(&engine);
        let supported =
            hostcalls::define(&mut linker).map_err(|e| HostError::Instantiate(format!("{e:#}")))?;
        for import in module.imports() {
            if !supported.contains(&(import.module(), import.name())) {
                return Err(HostError::UnknownImport {
                    module: import.module().to_owned(),
                    name: import.name().to_owned(),
                });
            }
        }
        if module.get_export(abi::ABI_MARKER).is_none() {
            return Err(HostError::NotProxyWasm(format!(
                "no {} export",
                abi::ABI_MARKER
            )));
        }
        let mut store = Store::new(&engine, State::new(config));
        if store.data().config.count_instructions {
            store
                .set_fuel(u64::MAX)
                .map_err(|e| HostError::Instantiate(format!("{e:#}")))?;
        }
        let instance = linker
            .instantiate(&mut store, &module)
            .map_err(|e| HostError::Instantiate(format!("{e:#}")))?;
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or_else(|| HostError::NotProxyWasm("no exported memory".to_owned()))?;
        let alloc = engine::allocator(&mut store, &instance)?;
        store.data_mut().memory = Some(memory);
        store.data_mut().alloc = Some(alloc);
        let calls = Callbacks::find(&mut store, &instance)?;
        Ok(Host {
            store,
            calls,
            root: 1,
            next_context: 2,
            crashed: None,
        })
    }

    /// Starts the VM as Envoy does: `_initialize`, the root context, `on_vm_start`,
    /// `on_configure`; a module that refuses either is refused.
    fn start(&mut self) -> Result<(), HostError> {
        self.call(self.calls.initialize.clone(), (), "_initialize")?;
        self.create_context(1, 0)?;
        let vm_config_len = self.store.data().config.vm_config.len() as i32;
        let vm_started = self.call(
            self.calls.on_vm_start.clone(),
            (1, vm_config_len),
            "proxy_on_vm_start",
        )?;
        if vm_started == Some(0) {
            return Err(HostError::Rejected {
                callback: "proxy_on_vm_start",
            });
        }
        if !self.configure(1)? {
            return Err(HostError::Rejected {
                callback: "proxy_on_configure",
            });
        }
        Ok(())
    }

    /// `proxy_on_context_create`: context `context`, under `parent` (0: a root context).
    fn create_context(&mut self, context: i32, parent: i32) -> Result<(), HostError> {
        self.call(
            self.calls.on_context_create.clone(),
            (context, parent),
            "proxy_on_context_create",
        )?;
        Ok(())
    }

    /// `proxy_on_configure` of root context `root`, with the current plugin configuration:
    /// whether the module takes it (a module without the callback takes anything).
    fn configure(&mut self, root: i32) -> Result<bool, HostError> {
        let len = self.store.data().config.plugin_config.len() as i32;
        let answer = self.call(
            self.calls.on_configure.clone(),
            (root, len),
            "proxy_on_configure",
        )?;
        Ok(answer != Some(0))
    }

    /// A new plugin configuration in the same VM, as Istio's ECDS does on a `pluginConfig`
    /// change: a new root context and `on_configure`. `Ok(false)` when the module refused it;
    /// the previous root context then stays in charge.
    pub fn reconfigure(&mut self, plugin_config: Vec<u8>) -> Result<bool, HostError> {
        let root = self.new_context();
        let previous = std::mem::replace(
            &mut self.store.data_mut().config.plugin_config,
            plugin_config,
        );
        self.create_context(root, 0)?;
        let accepted = self.configure(root)?;
        if accepted {
            self.root = root;
        } else {
            self.store.data_mut().config.plugin_config = previous;
        }
        Ok(accepted)
    }

    /// Sets the clock (`proxy_get_current_time_nanoseconds`, WASI clocks) to a fixed time in
    /// nanoseconds since the Unix epoch; it no longer follows real time.
    pub fn set_time_nanos(&mut self, nanos: u64) {
        self.store.data_mut().manual_time = Some(nanos);
    }

    /// Fires the root context's timer once (`proxy_on_tick`).
    pub fn tick(&mut self) -> Result<(), HostError> {
        self.call(self.calls.on_tick.clone(), self.root, "proxy_on_tick")?;
        Ok(())
    }

    /// The tick period the module asked for, in milliseconds (0: none).
    pub fn tick_period_ms(&self) -> u32 {
        self.store.data().tick_period_ms
    }

    /// Makes the named hostcall fail with `INTERNAL_FAILURE` from now on (`None`: none).
    pub fn set_fault(&mut self, hostcall: Option<String>) {
        self.store.data_mut().config.fault = hostcall;
    }

    /// The WebAssembly instructions the module has run so far (wasmtime fuel: about one per
    /// operator), or `None` unless [`HostConfig::count_instructions`] is set. The same module
    /// and requests give the same count on any machine, busy or not.
    pub fn instructions(&self) -> Option<u64> {
        if !self.store.data().config.count_instructions {
            return None;
        }
        self.store.get_fuel().ok().map(|left| u64::MAX - left)
    }

    /// Every metric the module defined, by name, with its current value.
    pub fn metrics(&self) -> BTreeMap<String, i64> {
        self.store.data().metrics_by_name()
    }

    /// The metrics as an Istio gateway with these `stats` serves them on `/stats/prometheus`
    /// ([`crate::envoy_stats`]).
    pub fn prometheus(&self, stats: &crate::envoy_stats::IstioStats) -> String {
        stats.prometheus(&self.store.data().metrics)
    }

    /// The module's log lines (level 0 = trace to 5 = critical), oldest first.
    pub fn logs(&self) -> Vec<(u32, String)> {
        self.store.data().logs.iter().cloned().collect()
    }

    /// Forgets the log lines seen so far.
    pub fn clear_logs(&mut self) {
        self.store.data_mut().logs.clear();
    }

    /// The bytes held in shared data (keys and values): what the module keeps in the VM.
    pub fn shared_data_bytes(&self) -> usize {
        self.store
            .data()
            .shared
            .iter()
            .map(|(k, (v, _))| k.len() + v.len())
            .sum()
    }

    /// A shared-data entry and its CAS token, as the module would read it.
    pub fn shared_data(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        self.store.data().shared.get(key).cloned()
    }

    /// Runs one request through the module, without an upstream: `on_context_create`,
    /// `on_request_headers` (and `on_request_body`), then `on_done`, `on_log`, `on_delete`.
    pub fn request(&mut self, request: Request) -> Result<Outcome, HostError> {
        self.request_ref(&request)
    }

    /// [`Host::request`] of a borrowed request (a bench sends the same one again and again).
    pub fn request_ref(&mut self, request: &Request) -> Result<Outcome, HostError> {
        let context = self.open_stream(request)?;
        let result = self.request_phase(context, request);
        let closed = self.close_stream(context);
        let outcome = result?;
        closed?;
        Ok(outcome)
    }

    /// Runs a whole exchange: the request phase, then (when the module lets it through)
    /// `upstream` with the request headers and body, then `on_response_headers` (and body) on
    /// its answer, then the end of the stream.
    pub fn exchange<F>(&mut self, request: Request, upstream: F) -> Result<Served, HostError>
    where
        F: FnOnce(&[(String, String)], &[u8]) -> Response,
    {
        let context = self.open_stream(&request)?;
        let result = self.exchange_phases(context, &request, upstream);
        let closed = self.close_stream(context);
        let served = result?;
        closed?;
        Ok(served)
    }

    fn exchange_phases<F>(
        &mut self,
        context: i32,
        request: &Request,
        upstream: F,
    ) -> Result<Served, HostError>
    where
        F: FnOnce(&[(String, String)], &[u8]) -> Response,
    {
        let request_headers = match self.request_phase(context, request)? {
            Outcome::Local {
                status,
                headers,
                body,
            } => {
                return Ok(Served::Local(Response {
                    status,
                    headers,
                    body,
                }));
            }
            Outcome::Continue { headers } => headers,
        };
        let request_body = self
            .stream()
            .map(|s| s.request_body.clone())
            .unwrap_or_default();
        let response = upstream(&request_headers, &request_body);
        match self.response_phase(context, &response)? {
            Some(local) => Ok(Served::Local(local)),
            None => Ok(Served::Upstream {
                request_headers,
                response: self.response_as_changed(response.status),
            }),
        }
    }

    /// The module's response callbacks on the upstream's `response`; `Some` when the module
    /// answered instead.
    fn response_phase(
        &mut self,
        context: i32,
        response: &Response,
    ) -> Result<Option<Response>, HostError> {
        if let Some(stream) = self.store.data_mut().stream.as_mut() {
            let mut headers = vec![(":status".to_owned(), response.status.to_string())];
            headers.extend(
                response
                    .headers
                    .iter()
                    .map(|(k, v)| (k.to_ascii_lowercase(), v.clone())),
            );
            stream.response_headers = headers;
            stream.response_body = response.body.clone();
            stream.end_of_stream = response.body.is_empty();
            stream.properties.insert(
                "response.code".to_owned(),
                i64::from(response.status).to_le_bytes().to_vec(),
            );
        }
        let n = self.stream().map_or(0, |s| s.response_headers.len()) as i32;
        let eos = i32::from(response.body.is_empty());
        if let Some(local) = self.stream_call(
            self.calls.on_response_headers.clone(),
            (context, n, eos),
            "proxy_on_response_headers",
        )? {
            return Ok(Some(local));
        }
        if !response.body.is_empty() {
            if let Some(stream) = self.store.data_mut().stream.as_mut() {
                stream.end_of_stream = true;
            }
            let len = response.body.len() as i32;
            if let Some(local) = self.stream_call(
                self.calls.on_response_body.clone(),
                (context, len, 1),
                "proxy_on_response_body",
            )? {
                return Ok(Some(local));
            }
        }
        Ok(None)
    }

    /// The response as the module's callbacks left it (`upstream_status` when they took the
    /// `:status` away), pseudo-headers removed.
    fn response_as_changed(&self, upstream_status: u32) -> Response {
        let stream = self.stream();
        let headers = stream
            .map(|s| s.response_headers.clone())
            .unwrap_or_default();
        let status = headers
            .iter()
            .find(|(k, _)| k == ":status")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(upstream_status);
        let body = stream.map(|s| s.response_body.clone()).unwrap_or_default();
        Response {
            status,
            headers: headers
                .into_iter()
                .filter(|(k, _)| !k.starts_with(':'))
                .collect(),
            body,
        }
    }

    fn request_phase(&mut self, context: i32, request: &Request) -> Result<Outcome, HostError> {
        let n = self.stream().map_or(0, |s| s.request_headers.len()) as i32;
        let eos = i32::from(request.body.is_none());
        if let Some(local) = self.stream_call(
            self.calls.on_request_headers.clone(),
            (context, n, eos),
            "proxy_on_request_headers",
        )? {
            return Ok(local.into_outcome());
        }
        if let Some(body) = &request.body {
            if let Some(stream) = self.store.data_mut().stream.as_mut() {
                stream.request_body = body.clone();
                stream.end_of_stream = true;
            }
            let len = body.len() as i32;
            if let Some(local) = self.stream_call(
                self.calls.on_request_body.clone(),
                (context, len, 1),
                "proxy_on_request_body",
            )? {
                return Ok(local.into_outcome());
            }
        }
        Ok(Outcome::Continue {
            headers: self
                .stream()
                .map(|s| s.request_headers.clone())
                .unwrap_or_default(),
        })
    }

    fn open_stream(&mut self, request: &Request) -> Result<i32, HostError> {
        if let Some(reason) = &self.crashed {
            return Err(HostError::Crashed(reason.clone()));
        }
        let context = self.new_context();
        let hops = self.store.data().config.xff_num_trusted_hops;
        self.store.data_mut().stream = Some(stream_for(request, context, hops));
        self.create_context(context, self.root)?;
        Ok(context)
    }

    fn close_stream(&mut self, context: i32) -> Result<(), HostError> {
        let result = (|| {
            if self.crashed.is_some() {
                return Ok(());
            }
            self.call(self.calls.on_done.clone(), context, "proxy_on_done")?;
            self.call(self.calls.on_log.clone(), context, "proxy_on_log")?;
            self.call(self.calls.on_delete.clone(), context, "proxy_on_delete")?;
            Ok(())
        })();
        self.store.data_mut().stream = None;
        result
    }

    /// Calls one of a stream's callbacks: the local reply it sent, if it sent one. A pause is
    /// refused ([`HostError::Paused`]).
    fn stream_call(
        &mut self,
        callback: Callback<(i32, i32, i32), i32>,
        params: (i32, i32, i32),
        name: &'static str,
    ) -> Result<Option<Response>, HostError> {
        let action = self.call(callback, params, name)?;
        if let Some(local) = self.take_local() {
            return Ok(Some(local));
        }
        match action {
            Some(action::PAUSE) => Err(HostError::Paused { callback: name }),
            _ => Ok(None),
        }
    }

    fn take_local(&mut self) -> Option<Response> {
        let local = self.store.data_mut().stream.as_mut()?.local.take()?;
        let status = i64::from(local.status).to_le_bytes().to_vec();
        if let Some(stream) = self.store.data_mut().stream.as_mut() {
            stream.properties.insert("response.code".to_owned(), status);
        }
        Some(Response {
            status: local.status,
            headers: local.headers,
            body: local.body,
        })
    }

    fn stream(&self) -> Option<&Stream> {
        self.store.data().stream.as_ref()
    }

    fn new_context(&mut self) -> i32 {
        let id = self.next_context;
        self.next_context = self.next_context.wrapping_add(1).max(2);
        id
    }

    /// Calls an optional callback; a trap marks the VM as crashed, as Envoy does.
    fn call<P: WasmParams, R: WasmResults>(
        &mut self,
        callback: Callback<P, R>,
        params: P,
        name: &'static str,
    ) -> Result<Option<R>, HostError> {
        let Some(func) = callback else {
            return Ok(None);
        };
        match func.call(&mut self.store, params) {
            Ok(result) => Ok(Some(result)),
            Err(err) => {
                let message = format!("{err:#}");
                self.crashed = Some(format!("trap in {name}"));
                self.store.data_mut().stream = None;
                Err(HostError::Trap {
                    callback: name,
                    message,
                })
            }
        }
    }
}

impl Response {
    fn into_outcome(self) -> Outcome {
        Outcome::Local {
            status: self.status,
            headers: self.headers,
            body: self.body,
        }
    }
}
