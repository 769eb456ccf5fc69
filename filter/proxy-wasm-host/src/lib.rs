//! A proxy-wasm ABI v0.2.1 host on wasmtime, for tests, benchmarks and `make demo` (crate
//! `pow-demo`). The upstream test framework (proxy-wasm-test-framework) is not on crates.io, and
//! Envoy cannot run here: this host is how the real module is exercised.
//!
//! It loads a real `.wasm` (the release `pow_filter.wasm`), refuses a module that imports a
//! function it does not implement (naming it), and drives the module the way Envoy does:
//! `_initialize`, `on_context_create(root, 0)`, `on_vm_start`, `on_configure`, then per request
//! `on_context_create(ctx, root)`, the request (and response) callbacks, `on_done`, `on_log`,
//! `on_delete`. It is synchronous and runs one stream at a time.
//!
//! ```no_run
//! use proxy_wasm_host::{Host, HostConfig, Outcome, Request};
//! # fn main() -> Result<(), proxy_wasm_host::HostError> {
//! let config = HostConfig { plugin_config: br#"{"mode":"all"}"#.to_vec(), ..HostConfig::default() };
//! let mut host = Host::load("pow_filter.wasm".as_ref(), config)?;
//! match host.request(Request::get("/").from_address("203.0.113.7:51000"))? {
//!     Outcome::Local { status, .. } => assert_eq!(status, 403),
//!     Outcome::Continue { .. } => {}
//! }
//! # Ok(()) }
//! ```
//!
//! What it implements: logging, time, ticks, buffers (bodies, VM and plugin configuration),
//! header maps, properties (`source.address`, `source.port`, `request.*`, `response.code`,
//! `plugin_root_id`), local responses, metrics, shared data with CAS, and the WASI calls a
//! `wasm32-wasip1` Rust module imports (`fd_write`, `environ_*`, `args_*`, `clock_time_get`,
//! `random_get`, `sched_yield`, `proc_exit`). Shared queues work within the VM (without
//! `on_queue_ready`). There is no upstream cluster, gRPC service or foreign function: those
//! calls fail as Envoy's do for an unknown name. Any other import is refused.

pub mod abi;
pub mod envoy_stats;
mod host;
mod hostcalls;
mod state;

pub use host::{Host, HostConfig, HostError, Outcome, Request, Response, Served};
