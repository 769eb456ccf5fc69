//! The wasmtime side of a [`super::Host`]: engines, compiled modules and the module's callbacks.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Mutex, OnceLock};

use wasmtime::{Engine, Instance, Module, Store, TypedFunc, WasmParams, WasmResults};

use crate::host::HostError;
use crate::state::State;

pub(super) type Callback<P, R> = Option<TypedFunc<P, R>>;

/// The module's callbacks (all optional in the spec).
pub(super) struct Callbacks {
    pub(super) initialize: Callback<(), ()>,
    pub(super) on_context_create: Callback<(i32, i32), ()>,
    pub(super) on_vm_start: Callback<(i32, i32), i32>,
    pub(super) on_configure: Callback<(i32, i32), i32>,
    pub(super) on_tick: Callback<i32, ()>,
    pub(super) on_request_headers: Callback<(i32, i32, i32), i32>,
    pub(super) on_request_body: Callback<(i32, i32, i32), i32>,
    pub(super) on_response_headers: Callback<(i32, i32, i32), i32>,
    pub(super) on_response_body: Callback<(i32, i32, i32), i32>,
    pub(super) on_done: Callback<i32, i32>,
    pub(super) on_log: Callback<i32, ()>,
    pub(super) on_delete: Callback<i32, ()>,
}

impl std::fmt::Debug for Callbacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Callbacks").finish_non_exhaustive()
    }
}

/// The engine without instruction counting. With `EDGEPOP_WASM_PERF_MAP` set, wasmtime writes
/// `/tmp/perf-<pid>.map`, so that `perf report` names the module's functions (filter/README.md,
/// "Profiling"); an engine that cannot be made so falls back to the default one.
fn plain_engine() -> Engine {
    if std::env::var_os("EDGEPOP_WASM_PERF_MAP").is_some() {
        let mut config = wasmtime::Config::new();
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        match Engine::new(&config) {
            Ok(engine) => return engine,
            Err(e) => eprintln!("proxy-wasm-host: no perf map ({e:#}); profiling without names"),
        }
    }
    Engine::default()
}

/// Compiled modules, by content: tests load the same .wasm many times and compiling it is the
/// slow part.
pub(super) fn compile(
    bytes: &[u8],
    count_instructions: bool,
) -> Result<(Engine, Module), HostError> {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    static METERED: OnceLock<Result<Engine, String>> = OnceLock::new();
    /// Instruction counting, length and hash of the module's bytes.
    type Key = (bool, usize, u64);
    static MODULES: OnceLock<Mutex<HashMap<Key, Module>>> = OnceLock::new();
    let engine = if count_instructions {
        METERED
            .get_or_init(|| {
                let mut config = wasmtime::Config::new();
                config.consume_fuel(true);
                Engine::new(&config).map_err(|e| format!("{e:#}"))
            })
            .clone()
            .map_err(HostError::Compile)?
    } else {
        ENGINE.get_or_init(plain_engine).clone()
    };
    let mut hasher = DefaultHasher::new();
    bytes.hash(&mut hasher);
    let key = (count_instructions, bytes.len(), hasher.finish());
    let cache = MODULES.get_or_init(Mutex::default);
    let cached = match cache.lock() {
        Ok(guard) => guard.get(&key).cloned(),
        Err(poisoned) => poisoned.into_inner().get(&key).cloned(),
    };
    if let Some(module) = cached {
        return Ok((engine, module));
    }
    let module = Module::new(&engine, bytes).map_err(|e| HostError::Compile(format!("{e:#}")))?;
    match cache.lock() {
        Ok(mut guard) => guard.insert(key, module.clone()),
        Err(poisoned) => poisoned.into_inner().insert(key, module.clone()),
    };
    Ok((engine, module))
}

fn typed<P: WasmParams, R: WasmResults>(
    store: &mut Store<State>,
    instance: &Instance,
    name: &str,
) -> Result<Callback<P, R>, HostError> {
    if instance.get_export(&mut *store, name).is_none() {
        return Ok(None);
    }
    instance
        .get_typed_func::<P, R>(&mut *store, name)
        .map(Some)
        .map_err(|e| HostError::NotProxyWasm(format!("export {name} has the wrong type: {e:#}")))
}

impl Callbacks {
    /// The module's callbacks, each `None` when not exported; one of the wrong type is refused.
    pub(super) fn find(
        store: &mut Store<State>,
        instance: &Instance,
    ) -> Result<Callbacks, HostError> {
        let start = match typed::<(), ()>(store, instance, "_initialize")? {
            Some(f) => Some(f),
            None => typed::<(), ()>(store, instance, "_start")?,
        };
        Ok(Callbacks {
            initialize: start,
            on_context_create: typed(store, instance, "proxy_on_context_create")?,
            on_vm_start: typed(store, instance, "proxy_on_vm_start")?,
            on_configure: typed(store, instance, "proxy_on_configure")?,
            on_tick: typed(store, instance, "proxy_on_tick")?,
            on_request_headers: typed(store, instance, "proxy_on_request_headers")?,
            on_request_body: typed(store, instance, "proxy_on_request_body")?,
            on_response_headers: typed(store, instance, "proxy_on_response_headers")?,
            on_response_body: typed(store, instance, "proxy_on_response_body")?,
            on_done: typed(store, instance, "proxy_on_done")?,
            on_log: typed(store, instance, "proxy_on_log")?,
            on_delete: typed(store, instance, "proxy_on_delete")?,
        })
    }
}

/// The module's allocator: `proxy_on_memory_allocate`, or `malloc` in older SDKs.
pub(super) fn allocator(
    store: &mut Store<State>,
    instance: &Instance,
) -> Result<TypedFunc<i32, i32>, HostError> {
    match typed::<i32, i32>(store, instance, "proxy_on_memory_allocate")? {
        Some(f) => Ok(f),
        None => typed::<i32, i32>(store, instance, "malloc")?.ok_or_else(|| {
            HostError::NotProxyWasm("no proxy_on_memory_allocate (or malloc) export".to_owned())
        }),
    }
}
