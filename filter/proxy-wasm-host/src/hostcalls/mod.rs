//! The functions the host offers the module: proxy-wasm ABI v0.2.1 (`env`) and the few WASI
//! preview1 calls a `wasm32-wasip1` Rust module imports.
//!
//! Each one first checks the injected fault: the hostcall named in `HostConfig::fault` returns
//! `INTERNAL_FAILURE` (WASI calls: errno `EIO`) without doing anything.

use wasmtime::{Caller, Linker};

use crate::abi::{buffer, map, status};
use crate::state::State;

type Result<T> = wasmtime::Result<T>;
/// The (module, name) pairs of the imports defined.
type Names = Vec<(&'static str, &'static str)>;

/// WASI errno values used here.
mod errno {
    pub const SUCCESS: i32 = 0;
    pub const BADF: i32 = 8;
    pub const FAULT: i32 = 21;
    pub const IO: i32 = 29;
}

/// The WASI module name of `wasm32-wasip1`.
pub const WASI: &str = "wasi_snapshot_preview1";

/// Defines hostcalls of one import module, each returning a status, and records their names
/// as supported. Each is written as a function of the caller and the ABI's arguments:
///
/// ```text
/// hostcalls! { linker, names, "env", fail;
///     fn proxy_log(caller, level: i32, ptr: i32, len: i32) { ... }
///     stub proxy_grpc_cancel(i32) -> status::NOT_FOUND;
/// }
/// ```
///
/// Every one first checks the injected fault: the hostcall named in `HostConfig::fault` returns
/// `fail` without doing anything. A `stub` ignores its arguments and returns its status.
macro_rules! hostcalls {
    ($linker:ident, $names:ident, $module:expr, $fail:expr; $($rest:tt)*) => {
        hostcalls!(@each $linker, $names, $module, $fail; $($rest)*);
    };
    (@each $linker:ident, $names:ident, $module:expr, $fail:expr;) => {};
    (@each $linker:ident, $names:ident, $module:expr, $fail:expr;
     fn $name:ident($caller:ident $(, $arg:ident : $ty:ty)* $(,)?) $body:block $($rest:tt)*) => {
        $names.push(($module, stringify!($name)));
        $linker.func_wrap(
            $module,
            stringify!($name),
            #[allow(unused_mut)]
            move |mut $caller: wasmtime::Caller<'_, crate::state::State> $(, $arg: $ty)*|
                  -> wasmtime::Result<i32> {
                if $caller.data().faulty(stringify!($name)) {
                    return Ok($fail);
                }
                $body
            },
        )?;
        hostcalls!(@each $linker, $names, $module, $fail; $($rest)*);
    };
    (@each $linker:ident, $names:ident, $module:expr, $fail:expr;
     stub $name:ident($($ty:ty),* $(,)?) -> $status:expr; $($rest:tt)*) => {
        $names.push(($module, stringify!($name)));
        $linker.func_wrap(
            $module,
            stringify!($name),
            move |caller: wasmtime::Caller<'_, crate::state::State> $(, _: $ty)*|
                  -> wasmtime::Result<i32> {
                if caller.data().faulty(stringify!($name)) {
                    return Ok($fail);
                }
                Ok($status)
            },
        )?;
        hostcalls!(@each $linker, $names, $module, $fail; $($rest)*);
    };
}

// --- guest memory --------------------------------------------------------------------------

/// The value of module memory a hostcall reads, or the hostcall returns `INVALID_MEMORY_ACCESS`
/// (Envoy's answer to a pointer outside the module's memory).
macro_rules! read_or_fault {
    ($read:expr) => {
        match $read {
            Some(value) => value,
            None => return Ok(crate::abi::status::INVALID_MEMORY_ACCESS),
        }
    };
}

/// The WASI errno of a call whose last step writes its result into the module's memory.
fn wasi_written(ok: bool) -> i32 {
    if ok { errno::SUCCESS } else { errno::FAULT }
}

/// The status of a hostcall whose last step writes its result into the module's memory.
fn written(ok: bool) -> i32 {
    if ok {
        status::OK
    } else {
        status::INVALID_MEMORY_ACCESS
    }
}

fn read(caller: &mut Caller<'_, State>, ptr: i32, len: i32) -> Option<Vec<u8>> {
    let memory = caller.data().memory?;
    let start = ptr as u32 as usize;
    let end = start.checked_add(len as u32 as usize)?;
    memory.data(&*caller).get(start..end).map(<[u8]>::to_vec)
}

fn read_string(caller: &mut Caller<'_, State>, ptr: i32, len: i32) -> Option<String> {
    read(caller, ptr, len).map(|b| String::from_utf8_lossy(&b).into_owned())
}

fn write(caller: &mut Caller<'_, State>, ptr: i32, bytes: &[u8]) -> bool {
    let Some(memory) = caller.data().memory else {
        return false;
    };
    let start = ptr as u32 as usize;
    let Some(end) = start.checked_add(bytes.len()) else {
        return false;
    };
    match memory.data_mut(&mut *caller).get_mut(start..end) {
        Some(dst) => {
            dst.copy_from_slice(bytes);
            true
        }
        None => false,
    }
}

fn write_u32(caller: &mut Caller<'_, State>, ptr: i32, value: u32) -> bool {
    write(caller, ptr, &value.to_le_bytes())
}

fn write_u64(caller: &mut Caller<'_, State>, ptr: i32, value: u64) -> bool {
    write(caller, ptr, &value.to_le_bytes())
}

/// Copies `bytes` into memory the module allocates, then writes the pointer and length at the
/// `return_*` addresses: the module takes ownership.
fn return_bytes(
    caller: &mut Caller<'_, State>,
    bytes: &[u8],
    ret_ptr: i32,
    ret_len: i32,
) -> Result<i32> {
    let Some(alloc) = caller.data().alloc.clone() else {
        return Ok(status::INTERNAL_FAILURE);
    };
    let Ok(len) = i32::try_from(bytes.len()) else {
        return Ok(status::BAD_ARGUMENT);
    };
    let guest = alloc.call(&mut *caller, len)?;
    if guest == 0 && len != 0 {
        return Ok(status::INVALID_MEMORY_ACCESS);
    }
    if write(caller, guest, bytes)
        && write_u32(caller, ret_ptr, guest as u32)
        && write_u32(caller, ret_len, len as u32)
    {
        Ok(status::OK)
    } else {
        Ok(status::INVALID_MEMORY_ACCESS)
    }
}

/// Like [`return_bytes`], for `size` bytes that `fill` writes straight into the module's
/// allocation (given the state too, as the bytes usually come from it): no staging copy.
fn return_with(
    caller: &mut Caller<'_, State>,
    size: usize,
    ret_ptr: i32,
    ret_len: i32,
    fill: impl FnOnce(&mut State, &mut [u8]),
) -> Result<i32> {
    let Some(alloc) = caller.data().alloc.clone() else {
        return Ok(status::INTERNAL_FAILURE);
    };
    let Some(memory) = caller.data().memory else {
        return Ok(status::INTERNAL_FAILURE);
    };
    let Ok(len) = i32::try_from(size) else {
        return Ok(status::BAD_ARGUMENT);
    };
    let guest = alloc.call(&mut *caller, len)?;
    if guest == 0 && len != 0 {
        return Ok(status::INVALID_MEMORY_ACCESS);
    }
    let start = guest as u32 as usize;
    let (data, state) = memory.data_and_store_mut(&mut *caller);
    let Some(dst) = start
        .checked_add(size)
        .and_then(|end| data.get_mut(start..end))
    else {
        return Ok(status::INVALID_MEMORY_ACCESS);
    };
    fill(state, dst);
    if write_u32(caller, ret_ptr, guest as u32) && write_u32(caller, ret_len, len as u32) {
        Ok(status::OK)
    } else {
        Ok(status::INVALID_MEMORY_ACCESS)
    }
}

/// "No value": OK with a NULL pointer.
fn return_none(caller: &mut Caller<'_, State>, ret_ptr: i32, ret_len: i32) -> i32 {
    if write_u32(caller, ret_ptr, 0) && write_u32(caller, ret_len, 0) {
        status::OK
    } else {
        status::INVALID_MEMORY_ACCESS
    }
}

// --- header maps and buffers ---------------------------------------------------------------

fn header_map(
    state: &mut State,
    map_type: i32,
) -> std::result::Result<&mut Vec<(String, String)>, i32> {
    let stream = state.stream.as_mut().ok_or(status::NOT_FOUND)?;
    match map_type {
        map::HTTP_REQUEST_HEADERS => Ok(&mut stream.request_headers),
        map::HTTP_REQUEST_TRAILERS => Ok(&mut stream.request_trailers),
        map::HTTP_RESPONSE_HEADERS => Ok(&mut stream.response_headers),
        map::HTTP_RESPONSE_TRAILERS => Ok(&mut stream.response_trailers),
        _ => Err(status::BAD_ARGUMENT),
    }
}

fn body(state: &mut State, buffer_type: i32) -> std::result::Result<&mut Vec<u8>, i32> {
    let stream = state.stream.as_mut().ok_or(status::NOT_FOUND)?;
    match buffer_type {
        buffer::HTTP_REQUEST_BODY => Ok(&mut stream.request_body),
        buffer::HTTP_RESPONSE_BODY => Ok(&mut stream.response_body),
        _ => Err(status::BAD_ARGUMENT),
    }
}

fn buffer_bytes(state: &mut State, buffer_type: i32) -> std::result::Result<Vec<u8>, i32> {
    match buffer_type {
        buffer::VM_CONFIGURATION => Ok(state.config.vm_config.clone()),
        buffer::PLUGIN_CONFIGURATION => Ok(state.config.plugin_config.clone()),
        _ => body(state, buffer_type).map(|b| b.clone()),
    }
}

fn property(state: &State, name: &str) -> Option<Vec<u8>> {
    if let Some(value) = state
        .stream
        .as_ref()
        .and_then(|s| s.properties.get(name))
        .or_else(|| state.set_properties.get(name))
    {
        return Some(value.clone());
    }
    match name {
        "plugin_root_id" | "plugin_name" => Some(state.config.root_id.clone().into_bytes()),
        _ => None,
    }
}

mod buffers;
mod calls_out;
mod header_maps;
mod logging;
mod metrics;
mod properties;
mod shared_data;
mod stream;
mod wasi;

/// Defines every supported import on `linker` and returns their (module, name) pairs: the
/// host refuses a module that imports anything else.
pub fn define(linker: &mut Linker<State>) -> Result<Names> {
    let mut names = Names::new();
    logging::define(linker, &mut names)?;
    buffers::define(linker, &mut names)?;
    header_maps::define(linker, &mut names)?;
    properties::define(linker, &mut names)?;
    stream::define(linker, &mut names)?;
    metrics::define(linker, &mut names)?;
    shared_data::define(linker, &mut names)?;
    calls_out::define(linker, &mut names)?;
    wasi::define(linker, &mut names)?;
    Ok(names)
}
