//! Hostcalls: Stream control.

use wasmtime::Linker;

use super::{Names, Result, read, read_string};
use crate::abi::{self, status};
use crate::state::{LocalReply, State};

/// What Envoy answers to a call on the current stream: OK while there is one, else NOT_FOUND.
fn stream_status(caller: &wasmtime::Caller<'_, State>) -> i32 {
    if caller.data().stream.is_some() {
        status::OK
    } else {
        status::NOT_FOUND
    }
}

pub(super) fn define(linker: &mut Linker<State>, names: &mut Names) -> Result<()> {
    let fail = status::INTERNAL_FAILURE;
    hostcalls! { linker, names, "env", fail;
        fn proxy_send_local_response(
            caller, code: i32, details_ptr: i32, details_len: i32, body_ptr: i32, body_len: i32,
            headers_ptr: i32, headers_len: i32, _grpc_status: i32
        ) {
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
        fn proxy_continue_stream(caller, _stream: i32) { Ok(stream_status(&caller)) }
        fn proxy_close_stream(caller, _stream: i32) { Ok(stream_status(&caller)) }
        fn proxy_set_effective_context(caller, _context: i32) { Ok(status::OK) }
        fn proxy_done(caller) {
            Ok(status::OK)
        }
    }
    Ok(())
}
