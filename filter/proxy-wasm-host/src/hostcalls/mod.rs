//! The functions the host offers the module: proxy-wasm ABI v0.2.1 (`env`) and the few WASI
//! preview1 calls a `wasm32-wasip1` Rust module imports.
//!
//! Each one first checks the injected fault: the hostcall named in `HostConfig::fault` returns
//! `INTERNAL_FAILURE` (WASI calls: errno `EIO`) without doing anything.

use wasmtime::{Caller, Linker};

use crate::abi::{self, buffer, map, status};
use crate::state::{LocalReply, State};

type Result<T> = wasmtime::Result<T>;

/// WASI errno values used here.
mod errno {
    pub const SUCCESS: i32 = 0;
    pub const BADF: i32 = 8;
    pub const FAULT: i32 = 21;
    pub const IO: i32 = 29;
}

/// The WASI module name of `wasm32-wasip1`.
pub const WASI: &str = "wasi_snapshot_preview1";

/// Defines a hostcall returning a status, and records its name as supported.
macro_rules! hostcall {
    ($linker:ident, $names:ident, $module:expr, $fail:expr, $name:literal,
     |$caller:ident $(, $arg:ident : $ty:ty)*| $body:block) => {{
        $names.push(($module, $name));
        $linker.func_wrap(
            $module,
            $name,
            #[allow(unused_mut)]
            move |mut $caller: Caller<'_, State> $(, $arg: $ty)*| -> Result<i32> {
                if $caller.data().faulty($name) {
                    return Ok($fail);
                }
                $body
            },
        )?;
    }};
}

// --- guest memory --------------------------------------------------------------------------

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

/// Defines every supported import on `linker` and returns their (module, name) pairs: the
/// host refuses a module that imports anything else.
pub fn define(linker: &mut Linker<State>) -> Result<Vec<(&'static str, &'static str)>> {
    let mut names: Vec<(&'static str, &'static str)> = Vec::new();
    let fail = status::INTERNAL_FAILURE;

    // --- logging, time, ticks ---
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_log",
        |caller, level: i32, ptr: i32, len: i32| {
            let Some(message) = read_string(&mut caller, ptr, len) else {
                return Ok(status::INVALID_MEMORY_ACCESS);
            };
            caller.data_mut().log(level as u32, message);
            Ok(status::OK)
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_get_log_level",
        |caller, ret: i32| {
            let level = caller.data().config.log_level;
            Ok(if write_u32(&mut caller, ret, level) {
                status::OK
            } else {
                status::INVALID_MEMORY_ACCESS
            })
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_get_current_time_nanoseconds",
        |caller, ret: i32| {
            let now = caller.data().now_nanos();
            Ok(if write_u64(&mut caller, ret, now) {
                status::OK
            } else {
                status::INVALID_MEMORY_ACCESS
            })
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_set_tick_period_milliseconds",
        |caller, period: i32| {
            caller.data_mut().tick_period_ms = period as u32;
            Ok(status::OK)
        }
    );

    // --- buffers ---
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_get_buffer_bytes",
        |caller, kind: i32, start: i32, max: i32, ret_ptr: i32, ret_len: i32| {
            let bytes = match buffer_bytes(caller.data_mut(), kind) {
                Ok(bytes) => bytes,
                Err(code) => return Ok(code),
            };
            let start = start as u32 as usize;
            if start >= bytes.len() {
                return Ok(return_none(&mut caller, ret_ptr, ret_len));
            }
            let end = start.saturating_add(max as u32 as usize).min(bytes.len());
            return_bytes(&mut caller, &bytes[start..end], ret_ptr, ret_len)
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_set_buffer_bytes",
        |caller, kind: i32, start: i32, size: i32, ptr: i32, len: i32| {
            let Some(value) = read(&mut caller, ptr, len) else {
                return Ok(status::INVALID_MEMORY_ACCESS);
            };
            let target = match body(caller.data_mut(), kind) {
                Ok(target) => target,
                Err(code) => return Ok(code),
            };
            let start = (start as u32 as usize).min(target.len());
            let end = start.saturating_add(size as u32 as usize).min(target.len());
            target.splice(start..end, value);
            Ok(status::OK)
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_get_buffer_status",
        |caller, kind: i32, ret_len: i32, ret_flags: i32| {
            let state = caller.data_mut();
            let eos = state.stream.as_ref().is_some_and(|s| s.end_of_stream);
            let len = match buffer_bytes(state, kind) {
                Ok(bytes) => bytes.len() as u32,
                Err(code) => return Ok(code),
            };
            Ok(
                if write_u32(&mut caller, ret_len, len)
                    && write_u32(&mut caller, ret_flags, u32::from(eos))
                {
                    status::OK
                } else {
                    status::INVALID_MEMORY_ACCESS
                },
            )
        }
    );

    // --- header maps ---
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_get_header_map_pairs",
        |caller, kind: i32, ret_ptr: i32, ret_len: i32| {
            let bytes = match header_map(caller.data_mut(), kind) {
                Ok(pairs) => abi::serialize_map(pairs),
                Err(code) => return Ok(code),
            };
            return_bytes(&mut caller, &bytes, ret_ptr, ret_len)
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_set_header_map_pairs",
        |caller, kind: i32, ptr: i32, len: i32| {
            let Some(bytes) = read(&mut caller, ptr, len) else {
                return Ok(status::INVALID_MEMORY_ACCESS);
            };
            let Some(pairs) = abi::deserialize_map(&bytes) else {
                return Ok(status::SERIALIZATION_FAILURE);
            };
            match header_map(caller.data_mut(), kind) {
                Ok(target) => *target = pairs,
                Err(code) => return Ok(code),
            }
            Ok(status::OK)
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_get_header_map_value",
        |caller, kind: i32, key_ptr: i32, key_len: i32, ret_ptr: i32, ret_len: i32| {
            let Some(key) = read_string(&mut caller, key_ptr, key_len) else {
                return Ok(status::INVALID_MEMORY_ACCESS);
            };
            let value = match header_map(caller.data_mut(), kind) {
                Ok(pairs) => pairs
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(&key))
                    .map(|(_, v)| v.clone()),
                Err(code) => return Ok(code),
            };
            match value {
                Some(value) => return_bytes(&mut caller, value.as_bytes(), ret_ptr, ret_len),
                None => Ok(status::NOT_FOUND),
            }
        }
    );
    for (name, replace) in [
        ("proxy_add_header_map_value", false),
        ("proxy_replace_header_map_value", true),
    ] {
        names.push(("env", name));
        linker.func_wrap(
            "env",
            name,
            move |mut caller: Caller<'_, State>,
                  kind: i32,
                  key_ptr: i32,
                  key_len: i32,
                  val_ptr: i32,
                  val_len: i32|
                  -> Result<i32> {
                if caller.data().faulty(name) {
                    return Ok(status::INTERNAL_FAILURE);
                }
                let (Some(key), Some(value)) = (
                    read_string(&mut caller, key_ptr, key_len),
                    read_string(&mut caller, val_ptr, val_len),
                ) else {
                    return Ok(status::INVALID_MEMORY_ACCESS);
                };
                match header_map(caller.data_mut(), kind) {
                    Ok(pairs) => {
                        if replace {
                            pairs.retain(|(k, _)| !k.eq_ignore_ascii_case(&key));
                        }
                        pairs.push((key.to_ascii_lowercase(), value));
                        Ok(status::OK)
                    }
                    Err(code) => Ok(code),
                }
            },
        )?;
    }
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_remove_header_map_value",
        |caller, kind: i32, key_ptr: i32, key_len: i32| {
            let Some(key) = read_string(&mut caller, key_ptr, key_len) else {
                return Ok(status::INVALID_MEMORY_ACCESS);
            };
            match header_map(caller.data_mut(), kind) {
                Ok(pairs) => {
                    pairs.retain(|(k, _)| !k.eq_ignore_ascii_case(&key));
                    Ok(status::OK)
                }
                Err(code) => Ok(code),
            }
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_get_header_map_size",
        |caller, kind: i32, ret: i32| {
            let size = match header_map(caller.data_mut(), kind) {
                Ok(pairs) => abi::serialize_map(pairs).len() as u32,
                Err(code) => return Ok(code),
            };
            Ok(if write_u32(&mut caller, ret, size) {
                status::OK
            } else {
                status::INVALID_MEMORY_ACCESS
            })
        }
    );

    // --- properties ---
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_get_property",
        |caller, path_ptr: i32, path_len: i32, ret_ptr: i32, ret_len: i32| {
            let Some(path) = read(&mut caller, path_ptr, path_len) else {
                return Ok(status::INVALID_MEMORY_ACCESS);
            };
            match property(caller.data(), &abi::property_name(&path)) {
                Some(value) => return_bytes(&mut caller, &value, ret_ptr, ret_len),
                None => Ok(status::NOT_FOUND),
            }
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_set_property",
        |caller, path_ptr: i32, path_len: i32, val_ptr: i32, val_len: i32| {
            let (Some(path), Some(value)) = (
                read(&mut caller, path_ptr, path_len),
                read(&mut caller, val_ptr, val_len),
            ) else {
                return Ok(status::INVALID_MEMORY_ACCESS);
            };
            caller
                .data_mut()
                .set_properties
                .insert(abi::property_name(&path), value);
            Ok(status::OK)
        }
    );

    // --- stream control ---
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_send_local_response",
        |caller,
         code: i32,
         details_ptr: i32,
         details_len: i32,
         body_ptr: i32,
         body_len: i32,
         headers_ptr: i32,
         headers_len: i32,
         _grpc_status: i32| {
            let (Some(details), Some(body), Some(headers)) = (
                read_string(&mut caller, details_ptr, details_len),
                read(&mut caller, body_ptr, body_len),
                read(&mut caller, headers_ptr, headers_len),
            ) else {
                return Ok(status::INVALID_MEMORY_ACCESS);
            };
            let Some(headers) = abi::deserialize_map(&headers) else {
                return Ok(status::SERIALIZATION_FAILURE);
            };
            let Some(stream) = caller.data_mut().stream.as_mut() else {
                return Ok(status::NOT_FOUND);
            };
            if stream.local.is_some() {
                return Ok(status::BAD_ARGUMENT);
            }
            stream.local = Some(LocalReply {
                status: code as u32,
                details,
                headers,
                body,
            });
            Ok(status::OK)
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_continue_stream",
        |caller, _stream: i32| {
            Ok(if caller.data().stream.is_some() {
                status::OK
            } else {
                status::NOT_FOUND
            })
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_close_stream",
        |caller, _stream: i32| {
            Ok(if caller.data().stream.is_some() {
                status::OK
            } else {
                status::NOT_FOUND
            })
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_set_effective_context",
        |caller, _context: i32| { Ok(status::OK) }
    );
    hostcall!(linker, names, "env", fail, "proxy_done", |caller| {
        Ok(status::OK)
    });

    // --- metrics ---
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_define_metric",
        |caller, kind: i32, name_ptr: i32, name_len: i32, ret: i32| {
            let Some(name) = read_string(&mut caller, name_ptr, name_len) else {
                return Ok(status::INVALID_MEMORY_ACCESS);
            };
            let Some(id) = caller.data_mut().define_metric(kind, name) else {
                return Ok(status::BAD_ARGUMENT);
            };
            Ok(if write_u32(&mut caller, ret, id) {
                status::OK
            } else {
                status::INVALID_MEMORY_ACCESS
            })
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_increment_metric",
        |caller, id: i32, offset: i64| {
            match caller.data_mut().metrics.get_mut(id as u32 as usize) {
                Some(m) if m.kind != abi::metric::HISTOGRAM => {
                    m.value = m.value.saturating_add(offset);
                    Ok(status::OK)
                }
                Some(_) => Ok(status::BAD_ARGUMENT),
                None => Ok(status::NOT_FOUND),
            }
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_record_metric",
        |caller, id: i32, value: i64| {
            match caller.data_mut().metrics.get_mut(id as u32 as usize) {
                Some(m) => {
                    m.value = value;
                    Ok(status::OK)
                }
                None => Ok(status::NOT_FOUND),
            }
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_get_metric",
        |caller, id: i32, ret: i32| {
            let Some(value) = caller
                .data()
                .metrics
                .get(id as u32 as usize)
                .map(|m| m.value)
            else {
                return Ok(status::NOT_FOUND);
            };
            Ok(if write_u64(&mut caller, ret, value as u64) {
                status::OK
            } else {
                status::INVALID_MEMORY_ACCESS
            })
        }
    );

    // --- shared data (per VM, compare-and-swap) ---
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_get_shared_data",
        |caller, key_ptr: i32, key_len: i32, ret_ptr: i32, ret_len: i32, ret_cas: i32| {
            let Some(key) = read_string(&mut caller, key_ptr, key_len) else {
                return Ok(status::INVALID_MEMORY_ACCESS);
            };
            let Some((value, cas)) = caller.data().shared.get(&key).cloned() else {
                return Ok(status::NOT_FOUND);
            };
            if !write_u32(&mut caller, ret_cas, cas) {
                return Ok(status::INVALID_MEMORY_ACCESS);
            }
            return_bytes(&mut caller, &value, ret_ptr, ret_len)
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_set_shared_data",
        |caller, key_ptr: i32, key_len: i32, val_ptr: i32, val_len: i32, cas: i32| {
            let (Some(key), Some(value)) = (
                read_string(&mut caller, key_ptr, key_len),
                read(&mut caller, val_ptr, val_len),
            ) else {
                return Ok(status::INVALID_MEMORY_ACCESS);
            };
            let state = caller.data_mut();
            let current = state.shared.get(&key).map(|(_, c)| *c);
            if cas != 0 && current != Some(cas as u32) {
                return Ok(status::CAS_MISMATCH);
            }
            state.next_cas = state.next_cas.wrapping_add(1).max(1);
            let next = state.next_cas;
            state.shared.insert(key, (value, next));
            Ok(status::OK)
        }
    );

    // --- calls out, queues, foreign functions ---
    // The Rust SDK's default trait methods reference these, so every module built with it
    // imports them. This host has no upstream cluster, gRPC service or foreign function: a
    // call fails as Envoy's does for an unknown cluster or name.
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_get_status",
        |caller, _ret_code: i32, _ret_ptr: i32, _ret_len: i32| {
            // Only meaningful in an HTTP or gRPC call's callback, which never happens here.
            Ok(status::NOT_FOUND)
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_http_call",
        |caller,
         _upstream_ptr: i32,
         _upstream_len: i32,
         _headers_ptr: i32,
         _headers_len: i32,
         _body_ptr: i32,
         _body_len: i32,
         _trailers_ptr: i32,
         _trailers_len: i32,
         _timeout_ms: i32,
         _ret_token: i32| { Ok(status::BAD_ARGUMENT) }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_grpc_call",
        |caller,
         _upstream_ptr: i32,
         _upstream_len: i32,
         _service_ptr: i32,
         _service_len: i32,
         _method_ptr: i32,
         _method_len: i32,
         _metadata_ptr: i32,
         _metadata_len: i32,
         _message_ptr: i32,
         _message_len: i32,
         _timeout_ms: i32,
         _ret_token: i32| { Ok(status::BAD_ARGUMENT) }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_grpc_stream",
        |caller,
         _upstream_ptr: i32,
         _upstream_len: i32,
         _service_ptr: i32,
         _service_len: i32,
         _method_ptr: i32,
         _method_len: i32,
         _metadata_ptr: i32,
         _metadata_len: i32,
         _ret_token: i32| { Ok(status::BAD_ARGUMENT) }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_grpc_send",
        |caller, _token: i32, _message_ptr: i32, _message_len: i32, _end_stream: i32| {
            Ok(status::NOT_FOUND)
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_grpc_cancel",
        |caller, _token: i32| { Ok(status::NOT_FOUND) }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_grpc_close",
        |caller, _token: i32| { Ok(status::NOT_FOUND) }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_call_foreign_function",
        |caller,
         _name_ptr: i32,
         _name_len: i32,
         _args_ptr: i32,
         _args_len: i32,
         _ret_ptr: i32,
         _ret_len: i32| { Ok(status::NOT_FOUND) }
    );
    // Shared queues work within the VM (no `on_queue_ready` is delivered: one VM, one thread).
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_register_shared_queue",
        |caller, name_ptr: i32, name_len: i32, ret_token: i32| {
            let Some(name) = read_string(&mut caller, name_ptr, name_len) else {
                return Ok(status::INVALID_MEMORY_ACCESS);
            };
            let token = caller.data_mut().queue_token(&name, true).unwrap_or(0);
            Ok(if write_u32(&mut caller, ret_token, token) {
                status::OK
            } else {
                status::INVALID_MEMORY_ACCESS
            })
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_resolve_shared_queue",
        |caller, _vm_ptr: i32, _vm_len: i32, name_ptr: i32, name_len: i32, ret_token: i32| {
            let Some(name) = read_string(&mut caller, name_ptr, name_len) else {
                return Ok(status::INVALID_MEMORY_ACCESS);
            };
            let Some(token) = caller.data_mut().queue_token(&name, false) else {
                return Ok(status::NOT_FOUND);
            };
            Ok(if write_u32(&mut caller, ret_token, token) {
                status::OK
            } else {
                status::INVALID_MEMORY_ACCESS
            })
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_enqueue_shared_queue",
        |caller, token: i32, ptr: i32, len: i32| {
            let Some(value) = read(&mut caller, ptr, len) else {
                return Ok(status::INVALID_MEMORY_ACCESS);
            };
            match caller
                .data_mut()
                .queues
                .get_mut((token as u32 as usize).wrapping_sub(1))
            {
                Some((_, queue)) => {
                    queue.push_back(value);
                    Ok(status::OK)
                }
                None => Ok(status::NOT_FOUND),
            }
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_dequeue_shared_queue",
        |caller, token: i32, ret_ptr: i32, ret_len: i32| {
            let value = match caller
                .data_mut()
                .queues
                .get_mut((token as u32 as usize).wrapping_sub(1))
            {
                Some((_, queue)) => queue.pop_front(),
                None => return Ok(status::NOT_FOUND),
            };
            match value {
                Some(value) => return_bytes(&mut caller, &value, ret_ptr, ret_len),
                None => Ok(status::EMPTY),
            }
        }
    );

    // --- WASI preview1: what a wasm32-wasip1 Rust module imports ---
    let eio = errno::IO;
    hostcall!(
        linker,
        names,
        WASI,
        eio,
        "fd_write",
        |caller, fd: i32, iovs: i32, iovs_len: i32, ret: i32| {
            if fd != 1 && fd != 2 {
                return Ok(errno::BADF);
            }
            let mut text = Vec::new();
            for i in 0..iovs_len.max(0) {
                let Some(iov) = read(&mut caller, iovs.wrapping_add(i * 8), 8) else {
                    return Ok(errno::FAULT);
                };
                let ptr = i32::from_le_bytes([iov[0], iov[1], iov[2], iov[3]]);
                let len = i32::from_le_bytes([iov[4], iov[5], iov[6], iov[7]]);
                let Some(chunk) = read(&mut caller, ptr, len) else {
                    return Ok(errno::FAULT);
                };
                text.extend_from_slice(&chunk);
            }
            let written = text.len() as u32;
            let message = String::from_utf8_lossy(&text).trim_end().to_owned();
            if !message.is_empty() {
                let level = if fd == 1 {
                    abi::log_level::INFO
                } else {
                    abi::log_level::ERROR
                };
                caller.data_mut().log(level, message);
            }
            Ok(if write_u32(&mut caller, ret, written) {
                errno::SUCCESS
            } else {
                errno::FAULT
            })
        }
    );
    hostcall!(
        linker,
        names,
        WASI,
        eio,
        "environ_sizes_get",
        |caller, ret_count: i32, ret_size: i32| {
            let env = &caller.data().config.env;
            let count = env.len() as u32;
            let size: usize = env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
            Ok(
                if write_u32(&mut caller, ret_count, count)
                    && write_u32(&mut caller, ret_size, size as u32)
                {
                    errno::SUCCESS
                } else {
                    errno::FAULT
                },
            )
        }
    );
    hostcall!(
        linker,
        names,
        WASI,
        eio,
        "environ_get",
        |caller, ptrs: i32, buf: i32| {
            let env = caller.data().config.env.clone();
            let mut at = buf;
            for (i, (k, v)) in env.iter().enumerate() {
                let entry = format!("{k}={v}\0");
                if !write_u32(&mut caller, ptrs.wrapping_add(i as i32 * 4), at as u32)
                    || !write(&mut caller, at, entry.as_bytes())
                {
                    return Ok(errno::FAULT);
                }
                at = at.wrapping_add(entry.len() as i32);
            }
            Ok(errno::SUCCESS)
        }
    );
    hostcall!(
        linker,
        names,
        WASI,
        eio,
        "args_sizes_get",
        |caller, ret_count: i32, ret_size: i32| {
            Ok(
                if write_u32(&mut caller, ret_count, 0) && write_u32(&mut caller, ret_size, 0) {
                    errno::SUCCESS
                } else {
                    errno::FAULT
                },
            )
        }
    );
    hostcall!(
        linker,
        names,
        WASI,
        eio,
        "args_get",
        |caller, _ptrs: i32, _buf: i32| { Ok(errno::SUCCESS) }
    );
    hostcall!(
        linker,
        names,
        WASI,
        eio,
        "clock_time_get",
        |caller, _id: i32, _precision: i64, ret: i32| {
            let now = caller.data().now_nanos();
            Ok(if write_u64(&mut caller, ret, now) {
                errno::SUCCESS
            } else {
                errno::FAULT
            })
        }
    );
    hostcall!(
        linker,
        names,
        WASI,
        eio,
        "random_get",
        |caller, buf: i32, len: i32| {
            let mut bytes = vec![0u8; len.max(0) as usize];
            if getrandom::fill(&mut bytes).is_err() {
                return Ok(errno::IO);
            }
            Ok(if write(&mut caller, buf, &bytes) {
                errno::SUCCESS
            } else {
                errno::FAULT
            })
        }
    );
    hostcall!(linker, names, WASI, eio, "sched_yield", |caller| {
        Ok(errno::SUCCESS)
    });
    names.push((WASI, "proc_exit"));
    linker.func_wrap(
        WASI,
        "proc_exit",
        |_caller: Caller<'_, State>, code: i32| -> Result<()> {
            Err(wasmtime::Error::msg(format!(
                "the module called proc_exit({code})"
            )))
        },
    )?;

    Ok(names)
}
