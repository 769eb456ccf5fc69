//! Hostcalls: Calls out, queues, foreign functions.
//!
//! The Rust SDK's default trait methods reference these, so every module built with it
//! imports them. This host has no upstream cluster, gRPC service or foreign function: a
//! call fails as Envoy's does for an unknown cluster or name.

use wasmtime::Linker;

use super::{Names, Result, read, read_string, return_bytes, write_u32, written};
use crate::abi::status;
use crate::state::State;

pub(super) fn define(linker: &mut Linker<State>, names: &mut Names) -> Result<()> {
    let fail = status::INTERNAL_FAILURE;
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
            let name = read_or_fault!(read_string(&mut caller, name_ptr, name_len));
            let token = caller.data_mut().queue_token(&name, true).unwrap_or(0);
            Ok(written(write_u32(&mut caller, ret_token, token)))
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_resolve_shared_queue",
        |caller, _vm_ptr: i32, _vm_len: i32, name_ptr: i32, name_len: i32, ret_token: i32| {
            let name = read_or_fault!(read_string(&mut caller, name_ptr, name_len));
            let Some(token) = caller.data_mut().queue_token(&name, false) else {
                return Ok(status::NOT_FOUND);
            };
            Ok(written(write_u32(&mut caller, ret_token, token)))
        }
    );
    hostcall!(
        linker,
        names,
        "env",
        fail,
        "proxy_enqueue_shared_queue",
        |caller, token: i32, ptr: i32, len: i32| {
            let value = read_or_fault!(read(&mut caller, ptr, len));
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
    Ok(())
}
