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
    hostcalls! { linker, names, "env", fail;
        // Only meaningful in an HTTP or gRPC call's callback, which never happens here.
        stub proxy_get_status(i32, i32, i32) -> status::NOT_FOUND;
        // (upstream, headers, body, trailers: pointer and length each), timeout, token out.
        stub proxy_http_call(i32, i32, i32, i32, i32, i32, i32, i32, i32, i32)
            -> status::BAD_ARGUMENT;
        // (upstream, service, method, metadata, message), timeout, token out.
        stub proxy_grpc_call(i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32)
            -> status::BAD_ARGUMENT;
        // (upstream, service, method, metadata), token out.
        stub proxy_grpc_stream(i32, i32, i32, i32, i32, i32, i32, i32, i32)
            -> status::BAD_ARGUMENT;
        // token, message, end of stream.
        stub proxy_grpc_send(i32, i32, i32, i32) -> status::NOT_FOUND;
        stub proxy_grpc_cancel(i32) -> status::NOT_FOUND;
        stub proxy_grpc_close(i32) -> status::NOT_FOUND;
        // (name, arguments, result out): no foreign function here.
        stub proxy_call_foreign_function(i32, i32, i32, i32, i32, i32) -> status::NOT_FOUND;
    }
    // Shared queues work within the VM (no `on_queue_ready` is delivered: one VM, one thread).
    hostcalls! { linker, names, "env", fail;
        fn proxy_register_shared_queue(caller, name_ptr: i32, name_len: i32, ret_token: i32) {
            let name = read_or_fault!(read_string(&mut caller, name_ptr, name_len));
            let token = caller.data_mut().queue_token(&name, true).unwrap_or(0);
            Ok(written(write_u32(&mut caller, ret_token, token)))
        }
        fn proxy_resolve_shared_queue(
            caller, _vm_ptr: i32, _vm_len: i32, name_ptr: i32, name_len: i32, ret_token: i32
        ) {
            let name = read_or_fault!(read_string(&mut caller, name_ptr, name_len));
            let Some(token) = caller.data_mut().queue_token(&name, false) else {
                return Ok(status::NOT_FOUND);
            };
            Ok(written(write_u32(&mut caller, ret_token, token)))
        }
        fn proxy_enqueue_shared_queue(caller, token: i32, ptr: i32, len: i32) {
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
        fn proxy_dequeue_shared_queue(caller, token: i32, ret_ptr: i32, ret_len: i32) {
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
    }
    Ok(())
}
