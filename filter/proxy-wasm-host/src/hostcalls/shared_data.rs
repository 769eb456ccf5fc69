//! Hostcalls: Shared data (per VM, compare-and-swap).

use wasmtime::Linker;

use super::{Names, Result, read, read_string, return_bytes, write_u32};
use crate::abi::status;
use crate::state::State;

pub(super) fn define(linker: &mut Linker<State>, names: &mut Names) -> Result<()> {
    let fail = status::INTERNAL_FAILURE;
    hostcalls! { linker, names, "env", fail;
        fn proxy_get_shared_data(
            caller, key_ptr: i32, key_len: i32, ret_ptr: i32, ret_len: i32, ret_cas: i32
        ) {
            let key = read_or_fault!(read_string(&mut caller, key_ptr, key_len));
            let Some((value, cas)) = caller.data().shared.get(&key).cloned() else {
                return Ok(status::NOT_FOUND);
            };
            if !write_u32(&mut caller, ret_cas, cas) {
                return Ok(status::INVALID_MEMORY_ACCESS);
            }
            return_bytes(&mut caller, &value, ret_ptr, ret_len)
        }
        fn proxy_set_shared_data(
            caller, key_ptr: i32, key_len: i32, val_ptr: i32, val_len: i32, cas: i32
        ) {
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
    }
    Ok(())
}
