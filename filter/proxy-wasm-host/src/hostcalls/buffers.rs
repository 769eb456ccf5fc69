//! Hostcalls: Buffers.

use wasmtime::Linker;

use super::{Names, Result, body, buffer_bytes, read, return_bytes, return_none, write_u32};
use crate::abi::status;
use crate::state::State;

pub(super) fn define(linker: &mut Linker<State>, names: &mut Names) -> Result<()> {
    let fail = status::INTERNAL_FAILURE;
    hostcalls! { linker, names, "env", fail;
        fn proxy_get_buffer_bytes(
            caller, kind: i32, start: i32, max: i32, ret_ptr: i32, ret_len: i32
        ) {
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
        fn proxy_set_buffer_bytes(caller, kind: i32, start: i32, size: i32, ptr: i32, len: i32) {
            let value = read_or_fault!(read(&mut caller, ptr, len));
            let target = match body(caller.data_mut(), kind) {
                Ok(target) => target,
                Err(code) => return Ok(code),
            };
            let start = (start as u32 as usize).min(target.len());
            let end = start.saturating_add(size as u32 as usize).min(target.len());
            target.splice(start..end, value);
            Ok(status::OK)
        }
        fn proxy_get_buffer_status(caller, kind: i32, ret_len: i32, ret_flags: i32) {
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
    }
    Ok(())
}
